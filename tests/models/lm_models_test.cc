// The gpt2 and llama modules: counts, names, shapes, causality, gradients,
// the per-block structure, and bad input.
#include "common/error.h"
#include "libtorch/compat.h"
#include "models/language_model.h"
#include "models/lm_counts.h"
#include "models/transformer_ops.h"

#include <gtest/gtest.h>

#include <set>

#include "tests/support/text.h"

namespace dtrain::models {
namespace {

using testing::configErrorOf;
using testing::contains;

LanguageModelConfig tiny(const std::string& family, int64_t kv_heads = 4, bool tied = true) {
  LanguageModelOverrides o;
  o.layers = 2;
  o.dim = 32;
  o.heads = 4;
  if (family == "llama") o.kv_heads = kv_heads;
  o.seq_len = 16;
  o.vocab_size = 50;
  o.tie_embeddings = tied;
  return namedLanguageModel(family, o);
}

int64_t registeredParameters(torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& p : module.parameters()) count += p.numel();
  return count;
}

std::set<std::string> parameterNames(torch::nn::Module& module) {
  std::set<std::string> names;
  for (const auto& p : module.named_parameters()) names.insert(p.key());
  return names;
}

torch::Tensor tokens(int64_t batch, int64_t seq, int64_t vocab) { return torch::randint(vocab, {batch, seq}); }

const LanguageModelConfig kTinies[] = {tiny("gpt2"), tiny("gpt2", 4, false), tiny("llama", 2, false),
                                       tiny("llama", 1, true), tiny("llama", 4, true)};

TEST(LmModelsTest, ParameterCountMatchesTheModules) {
  for (const LanguageModelConfig& c : kTinies) {
    auto model = createLanguageModel(c);
    EXPECT_EQ(registeredParameters(*model), parameterCount(c)) << lmFamilyName(c.family) << " kv " << c.kv_heads;
  }
}

TEST(LmModelsTest, Gpt2SmallHasGpt2sParameterCount) {
  auto model = createLanguageModel(namedLanguageModel("gpt2-124m"));
  EXPECT_EQ(registeredParameters(*model), 124'439'808);
}

TEST(LmModelsTest, Gpt2ParameterNamesAreNanoGpts) {
  const std::set<std::string> block = {"ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight",
                                       "attn.c_attn.bias",   "attn.c_proj.weight", "attn.c_proj.bias",
                                       "ln_2.weight",        "ln_2.bias",        "mlp.c_fc.weight",
                                       "mlp.c_fc.bias",      "mlp.c_proj.weight", "mlp.c_proj.bias"};
  std::set<std::string> expected = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
                                    "transformer.ln_f.bias"};
  for (int i = 0; i < 2; ++i) {
    for (const auto& name : block) expected.insert("transformer.h." + std::to_string(i) + "." + name);
  }
  auto tied = createLanguageModel(tiny("gpt2"));
  EXPECT_EQ(parameterNames(*tied), expected);
  expected.insert("lm_head.weight");
  EXPECT_EQ(parameterNames(*createLanguageModel(tiny("gpt2", 4, false))), expected);
  EXPECT_EQ(tied->named_parameters()["transformer.h.1.attn.c_attn.weight"].sizes(),
            (std::vector<int64_t>{96, 32}));
}

TEST(LmModelsTest, LlamaParameterNamesAreMetas) {
  const std::set<std::string> block = {"attention_norm.weight", "attention.wq.weight",     "attention.wk.weight",
                                       "attention.wv.weight",   "attention.wo.weight",     "ffn_norm.weight",
                                       "feed_forward.w1.weight", "feed_forward.w2.weight", "feed_forward.w3.weight"};
  std::set<std::string> expected = {"tok_embeddings.weight", "norm.weight"};
  for (int i = 0; i < 2; ++i) {
    for (const auto& name : block) expected.insert("layers." + std::to_string(i) + "." + name);
  }
  EXPECT_EQ(parameterNames(*createLanguageModel(tiny("llama", 2, true))), expected);
  expected.insert("output.weight");
  auto untied = createLanguageModel(tiny("llama", 2, false));
  EXPECT_EQ(parameterNames(*untied), expected);
  auto params = untied->named_parameters();
  EXPECT_EQ(params["layers.0.attention.wk.weight"].sizes(), (std::vector<int64_t>{16, 32}));  // 2 kv heads x 8
  EXPECT_EQ(params["layers.0.feed_forward.w1.weight"].sizes(), (std::vector<int64_t>{256, 32}));
}

TEST(LmModelsTest, LogitsShapeAndLoss) {
  for (const LanguageModelConfig& c : kTinies) {
    SCOPED_TRACE(lmFamilyName(c.family));
    torch::manual_seed(0);
    auto model = createLanguageModel(c);
    const torch::Tensor x = tokens(3, 16, c.vocab_size), y = tokens(3, 16, c.vocab_size);
    const torch::Tensor logits = model->forward(x);
    EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 16, c.vocab_size}));
    const torch::Tensor loss = model->loss(x, y);
    EXPECT_EQ(loss.scalar_type(), torch::kFloat);
    EXPECT_EQ(loss.dim(), 0);
    const torch::Tensor expected =
        torch::nn::functional::cross_entropy(logits.reshape({-1, c.vocab_size}), y.reshape({-1}));
    EXPECT_TRUE(torch::allclose(loss, expected, 1e-6, 1e-6));
    // At initialisation the model is near uniform over the vocabulary.
    EXPECT_NEAR(loss.item<double>(), std::log(static_cast<double>(c.vocab_size)), 0.2);
  }
}

TEST(LmModelsTest, ChangingAFutureTokenLeavesEarlierLogitsAlone) {
  for (const LanguageModelConfig& c : kTinies) {
    SCOPED_TRACE(lmFamilyName(c.family));
    torch::manual_seed(1);
    auto model = createLanguageModel(c);
    torch::NoGradGuard no_grad;
    torch::Tensor x = tokens(2, 12, c.vocab_size);
    const torch::Tensor before = model->forward(x);
    x.index_put_({torch::indexing::Slice(), 7}, (x.index({torch::indexing::Slice(), 7}) + 1) % c.vocab_size);
    const torch::Tensor after = model->forward(x);
    using torch::indexing::Slice;
    EXPECT_TRUE(torch::allclose(before.index({Slice(), Slice(0, 7)}), after.index({Slice(), Slice(0, 7)}), 0, 1e-6));
    EXPECT_FALSE(torch::allclose(before.index({Slice(), Slice(7)}), after.index({Slice(), Slice(7)}), 0, 1e-3));
  }
}

TEST(LmModelsTest, ForwardIsTheBlocksInOrder) {
  for (const LanguageModelConfig& c : kTinies) {
    SCOPED_TRACE(lmFamilyName(c.family));
    auto model = createLanguageModel(c);
    ASSERT_EQ(model->blocks().size(), 2u);
    torch::NoGradGuard no_grad;
    const torch::Tensor x = tokens(2, 8, c.vocab_size);
    torch::Tensor h = model->embed(x);
    for (const auto& block : model->blocks()) h = block->forward(h);
    const torch::Tensor logits = ops::classifier(model->finalNorm(h), model->outputWeight());
    EXPECT_TRUE(torch::equal(logits, model->forward(x)));
  }
}

TEST(LmModelsTest, ShardingUnitsCoverEveryParameterOnce) {
  for (const LanguageModelConfig& c : kTinies) {
    SCOPED_TRACE(lmFamilyName(c.family));
    auto model = createLanguageModel(c);
    std::vector<torch::Tensor> units = model->embeddingParameters();
    for (const auto& block : model->blocks()) {
      for (const auto& p : block->parameters()) units.push_back(p);
    }
    for (const auto& p : model->headParameters()) units.push_back(p);
    std::set<const void*> seen;
    for (const auto& p : units) EXPECT_TRUE(seen.insert(p.unsafeGetTensorImpl()).second);
    std::set<const void*> all;
    for (const auto& p : model->parameters()) all.insert(p.unsafeGetTensorImpl());
    EXPECT_EQ(seen, all);
    const bool tied = model->outputWeight().unsafeGetTensorImpl() ==
                      model->embeddingParameters()[0].unsafeGetTensorImpl();
    EXPECT_EQ(tied, c.tie_embeddings);
  }
}

TEST(LmModelsTest, InitialisationIsGpt2sAndSeeded) {
  const LanguageModelConfig c = namedLanguageModel("gpt2", [] {
    LanguageModelOverrides o;
    o.layers = 8;
    o.dim = 256;
    o.heads = 4;
    return o;
  }());
  torch::manual_seed(7);
  auto a = createLanguageModel(c);
  torch::manual_seed(7);
  auto b = createLanguageModel(c);
  auto pa = a->named_parameters(), pb = b->named_parameters();
  for (const auto& item : pa) EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
  EXPECT_NEAR(pa["transformer.h.0.attn.c_attn.weight"].std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(pa["transformer.wte.weight"].std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(pa["transformer.h.3.mlp.c_proj.weight"].std().item<double>(), 0.02 / std::sqrt(16.0), 0.0003);
  EXPECT_EQ(pa["transformer.h.0.attn.c_attn.bias"].abs().sum().item<double>(), 0);
  EXPECT_TRUE(torch::equal(pa["transformer.h.0.ln_1.weight"], torch::ones({256})));
  auto llama = createLanguageModel(tiny("llama", 2, false))->named_parameters();
  EXPECT_TRUE(torch::equal(llama["layers.1.ffn_norm.weight"], torch::ones({32})));
  EXPECT_NEAR(llama["layers.0.feed_forward.w1.weight"].std().item<double>(), 0.02, 0.002);
}

TEST(LmModelsTest, TrainingFlopsPerSampleIsSeqTimesPerToken) {
  auto model = createLanguageModel(tiny("llama", 2, false));
  const LanguageModelConfig& c = model->config();
  EXPECT_DOUBLE_EQ(model->trainingFlopsPerToken(16), trainingFlopsPerToken(c, 16));
  EXPECT_DOUBLE_EQ(model->trainingFlopsPerSample(), 16 * trainingFlopsPerToken(c, 16));
}

// Central differences in double against autograd on a few entries of a few
// parameters (every kind of layer the loss flows through).
TEST(LmModelsTest, GradientsMatchFiniteDifferences) {
  for (const LanguageModelConfig& c : {tiny("gpt2"), tiny("llama", 2, false)}) {
    SCOPED_TRACE(lmFamilyName(c.family));
    torch::manual_seed(3);
    auto model = createLanguageModel(c);
    model->to(torch::kDouble);
    const torch::Tensor x = tokens(2, 6, c.vocab_size), y = tokens(2, 6, c.vocab_size);
    model->zero_grad();
    model->loss(x, y).backward();
    torch::NoGradGuard no_grad;
    int checked = 0;
    for (auto& item : model->named_parameters()) {
      torch::Tensor flat = item.value().view({-1});
      const torch::Tensor grad = item.value().grad().view({-1});
      for (int64_t index : {int64_t{0}, flat.numel() / 2 + 1}) {
        const double original = flat[index].item<double>(), step = 1e-6;
        flat[index] = original + step;
        const double up = model->loss(x, y).item<double>();
        flat[index] = original - step;
        const double down = model->loss(x, y).item<double>();
        flat[index] = original;
        const double numeric = (up - down) / (2 * step), analytic = grad[index].item<double>();
        EXPECT_NEAR(analytic, numeric, 1e-7 + 1e-5 * std::abs(numeric)) << item.key() << "[" << index << "]";
        ++checked;
      }
    }
    EXPECT_GT(checked, 20);
  }
}

TEST(LmModelsTest, AutocastLogitsAreLowPrecisionLossIsFloat32) {
  auto model = createLanguageModel(tiny("llama", 2, false));
  const torch::Tensor x = tokens(2, 8, 50);
  compat::setAutocastDtype(c10::DeviceType::CPU, torch::kBFloat16);
  compat::setAutocastEnabled(c10::DeviceType::CPU, true);
  const torch::Tensor logits = model->forward(x);
  const torch::Tensor loss = model->loss(x, x);
  compat::setAutocastEnabled(c10::DeviceType::CPU, false);
  at::autocast::clear_cache();
  EXPECT_EQ(logits.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(loss.scalar_type(), torch::kFloat);
  EXPECT_NEAR(loss.item<double>(), model->loss(x, x).item<double>(), 0.05);
}

// The norms feed matmuls only, so under autocast they hand over autocast's
// dtype (transformer_ops.h) while the residual stream keeps float32; the
// values are the float32 norm's, rounded once.
TEST(LmModelsTest, NormsUnderAutocastReturnAutocastsDtypeAndKeepTheStream) {
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({3, 5, 16}), update = torch::randn({3, 5, 16}).to(torch::kBFloat16);
  const torch::Tensor w = torch::rand({16}) + 0.5, b = torch::randn({16});
  const torch::Tensor ln = ops::layerNorm(x, w, b, 1e-5), rms = ops::rmsNorm(x, w, 1e-5);
  compat::setAutocastDtype(c10::DeviceType::CPU, torch::kBFloat16);
  compat::setAutocastEnabled(c10::DeviceType::CPU, true);
  const torch::Tensor ln_auto = ops::layerNorm(x, w, b, 1e-5), rms_auto = ops::rmsNorm(x, w, 1e-5);
  const ops::ResidualAndNormed added = ops::addLayerNorm(x, update, w, b, 1e-5);
  const ops::ResidualAndNormed added_rms = ops::addRmsNorm(x, update, w, 1e-5);
  compat::setAutocastEnabled(c10::DeviceType::CPU, false);
  at::autocast::clear_cache();
  EXPECT_EQ(ln.scalar_type(), torch::kFloat);
  EXPECT_EQ(ln_auto.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(rms_auto.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(ln_auto, ln.to(torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(rms_auto, rms.to(torch::kBFloat16)));
  EXPECT_EQ(added.residual.scalar_type(), torch::kFloat);
  EXPECT_EQ(added.normed.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(added.residual, x + update.to(torch::kFloat)));
  EXPECT_TRUE(torch::equal(added.normed, ops::layerNorm(added.residual, w, b, 1e-5).to(torch::kBFloat16)));
  EXPECT_EQ(added_rms.normed.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(added_rms.normed, ops::rmsNorm(added_rms.residual, w, 1e-5).to(torch::kBFloat16)));
}

// On a GPU (skipped elsewhere): float32 logits agree with the CPU's, and a
// bf16 autocast step gives bf16 logits, a float32 loss and finite gradients.
TEST(LmModelsTest, CudaAgreesWithCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const LanguageModelConfig& c : kTinies) {
    SCOPED_TRACE(lmFamilyName(c.family));
    torch::manual_seed(5);
    auto model = createLanguageModel(c);
    const torch::Tensor x = tokens(2, 16, c.vocab_size);
    const torch::Tensor cpu = model->forward(x).detach();
    model->to(torch::kCUDA);
    const torch::Tensor gpu = model->forward(x.to(torch::kCUDA)).detach().cpu();
    EXPECT_TRUE(torch::allclose(gpu, cpu, 1e-4, 1e-4)) << (gpu - cpu).abs().max().item<double>();
    compat::setAutocastDtype(c10::DeviceType::CUDA, torch::kBFloat16);
    compat::setAutocastEnabled(c10::DeviceType::CUDA, true);
    const torch::Tensor logits = model->forward(x.to(torch::kCUDA));
    const torch::Tensor loss = model->loss(x.to(torch::kCUDA), x.to(torch::kCUDA));
    compat::setAutocastEnabled(c10::DeviceType::CUDA, false);
    at::autocast::clear_cache();
    EXPECT_EQ(logits.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(loss.scalar_type(), torch::kFloat);
    loss.backward();
    for (const auto& p : model->parameters()) EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>());
  }
}

TEST(LmModelsTest, CreateModelBuildsLanguageModels) {
  ModelOptions options;
  options.language_model.layers = 1;
  options.language_model.dim = 16;
  options.language_model.heads = 2;
  options.language_model.kv_heads = 1;
  options.language_model.vocab_size = 20;
  auto model = std::dynamic_pointer_cast<LanguageModel>(createModel("llama", options));
  ASSERT_TRUE(model);
  EXPECT_EQ(model->config().kv_heads, 1);
  EXPECT_EQ(model->forward(tokens(1, 4, 20)).sizes(), (std::vector<int64_t>{1, 4, 20}));
  const std::string msg = configErrorOf([] { createModel("gpt5", ModelOptions{}); });
  EXPECT_TRUE(contains(msg, "resnet18") && contains(msg, "gpt2-1.5b") && contains(msg, "llama-8b")) << msg;
}

TEST(LmModelsTest, BadInputNamesWhatWasExpected) {
  auto model = createLanguageModel(tiny("gpt2"));
  EXPECT_TRUE(contains(configErrorOf([&] { model->forward(torch::zeros({2, 4})); }),
                       "input tokens must be int64 [batch, seq], got Float [2, 4]"));
  EXPECT_TRUE(contains(configErrorOf([&] { model->forward(torch::zeros({8}, torch::kLong)); }),
                       "input tokens must be int64 [batch, seq], got Long [8]"));
  EXPECT_TRUE(contains(configErrorOf([&] { model->forward(torch::zeros({1, 1025}, torch::kLong)); }),
                       "input has 1025 tokens per sequence, more than its 1024 positions"));
  EXPECT_TRUE(contains(configErrorOf([&] {
                         model->loss(torch::zeros({2, 4}, torch::kLong), torch::zeros({2, 3}, torch::kLong));
                       }),
                       "targets must be int64 of the tokens' shape [2, 4], got Long [2, 3]"));
  LanguageModelConfig bad = tiny("llama");
  bad.heads = 5;
  EXPECT_TRUE(contains(configErrorOf([&] { createLanguageModel(bad); }), "--heads 5 must divide --dim 32"));
}

// Records each reported operation; checks that every start has its end.
class RecordingObserver : public ops::OpObserver {
 public:
  void opStarted(ops::OpKind kind, const torch::Tensor& on) override {
    EXPECT_FALSE(open_) << "operations nest: " << ops::opKindName(kind);
    EXPECT_TRUE(on.defined());
    open_ = true;
    ++started[static_cast<int>(kind)];
  }
  void opEnded(ops::OpKind kind, const torch::Tensor&) override {
    EXPECT_TRUE(open_);
    open_ = false;
    ++ended[static_cast<int>(kind)];
  }
  int started[ops::kOpKinds] = {};
  int ended[ops::kOpKinds] = {};

 private:
  bool open_ = false;
};

// A forward pass reports its norms, MLP activations, rotary embeddings,
// attentions, head and products, once each, and nothing once the observer
// is unset.
TEST(LmModelsTest, ForwardReportsEachOperationToTheObserver) {
  for (const std::string family : {"gpt2", "llama"}) {
    const LanguageModelConfig c = tiny(family, 2);
    auto model = createLanguageModel(c);
    const torch::Tensor x = tokens(2, c.seq_len, c.vocab_size), y = tokens(2, c.seq_len, c.vocab_size);
    RecordingObserver seen;
    ops::setOpObserver(&seen);
    model->loss(x, y);
    ops::setOpObserver(nullptr);
    model->loss(x, y);
    const int layers = static_cast<int>(c.layers);
    // Products outside those operations: llama's q, k and v (one report:
    // they share their input), o, gate and up (one report), and down;
    // gpt2's fused q/k/v and its output projection (its MLP's are in
    // mlp_activation). No FP8 on the CPU.
    const int products = family == "llama" ? 4 * layers : 2 * layers;
    const int expected[ops::kOpKinds] = {2 * layers + 1, layers, family == "llama" ? 2 * layers : 0, layers, 1,
                                         products, 0, 0};
    for (int k = 0; k < ops::kOpKinds; ++k) {
      const char* name = ops::opKindName(static_cast<ops::OpKind>(k));
      EXPECT_EQ(seen.started[k], expected[k]) << family << " " << name;
      EXPECT_EQ(seen.ended[k], expected[k]) << family << " " << name;
    }
  }
}

}  // namespace
}  // namespace dtrain::models
