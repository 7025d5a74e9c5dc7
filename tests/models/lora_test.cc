// LoRA (models/lora.h): one adapted layer against the dense formula
// computed by hand, forward and gradients (and central differences), the
// base weight without a gradient; an adapted model at init equal to its
// base, the names and shapes of its adapters, only adapters trainable; the
// merged weights computing what the adapted model does; bad configs.
#include "common/error.h"
#include "models/language_model.h"
#include "models/lora.h"
#include "models/lora_config.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/models/tensor_compare.h"
#include "tests/support/text.h"

namespace dtrain::models {
namespace {

using dtrain::testing::configErrorOf;
using dtrain::testing::contains;

LanguageModelConfig tiny(const std::string& family) {
  LanguageModelOverrides o;
  o.layers = 2;
  o.dim = 32;
  o.heads = 4;
  if (family == "llama") o.kv_heads = 2;
  o.seq_len = 16;
  o.vocab_size = 50;
  o.tie_embeddings = family == "gpt2";
  return namedLanguageModel(family, o);
}

LoraConfig config(int64_t rank, double alpha, const std::string& targets) {
  return LoraConfig{rank, alpha, parseLoraTargets(targets)};
}

// Every adapter's B drawn at random, so that the adapters change the output.
void perturbAdapters(const LoraAdapters& adapters) {
  torch::NoGradGuard no_grad;
  for (const LoraAdapter& a : adapters.all()) a.b.copy_(torch::randn_like(a.b) * 0.1);
}

// y = x Wᵀ + b + (alpha / r)(x Aᵀ)Bᵀ on the rows [begin, begin + rows) of
// a 16-row layer, against the formula written out; the gradients of A and
// B against the formula's (dB = s gᵀ(x Aᵀ), dA = s (g B)ᵀ x for the output
// gradient g on those rows) and against central differences; W none.
TEST(LoraTest, AnAdaptedLayerIsTheDenseFormulaAndItsBaseGetsNoGradient) {
  for (const auto& [begin, rows] : {std::pair<int64_t, int64_t>{0, 16}, {4, 8}}) {
    SCOPED_TRACE("rows " + std::to_string(begin) + ".." + std::to_string(begin + rows));
    torch::manual_seed(7);
    torch::nn::Linear layer(torch::nn::LinearOptions(12, 16));
    layer->to(torch::kDouble);
    layer->weight.requires_grad_(false);
    layer->bias.requires_grad_(false);
    BlockSeams seams;
    seams.lora.add(LoraSite{layer.get(), layer->weight, begin, rows, "_x"}, config(3, 6.0, "q"));
    const LoraAdapter& adapter = seams.lora.all().at(0);
    perturbAdapters(seams.lora);
    EXPECT_EQ(layer->named_parameters()["lora_A_x"].sizes(), (std::vector<int64_t>{3, 12}));
    EXPECT_EQ(layer->named_parameters()["lora_B_x"].sizes(), (std::vector<int64_t>{rows, 3}));

    const torch::Tensor x = torch::randn({2, 5, 12}, torch::kDouble);
    const torch::Tensor g = torch::randn({2, 5, 16}, torch::kDouble);
    const torch::Tensor y = blockLinear(seams, x, layer->weight, layer->bias);
    (y * g).sum().backward();

    const double s = 6.0 / 3;
    const torch::Tensor xa = torch::matmul(x, adapter.a.detach().t());  // [2, 5, 3]
    torch::Tensor expected = torch::matmul(x, layer->weight.t()) + layer->bias;
    expected.narrow(-1, begin, rows).add_(s * torch::matmul(xa, adapter.b.detach().t()));
    EXPECT_LT(maxRelativeError(y.detach(), expected), 1e-12);
    const torch::Tensor g_rows = g.narrow(-1, begin, rows).reshape({-1, rows});
    const torch::Tensor grad_b = s * torch::matmul(g_rows.t(), xa.reshape({-1, 3}));
    const torch::Tensor grad_a = s * torch::matmul(torch::matmul(g_rows, adapter.b.detach()).t(), x.reshape({-1, 12}));
    EXPECT_LT(maxRelativeError(adapter.b.grad(), grad_b), 1e-12);
    EXPECT_LT(maxRelativeError(adapter.a.grad(), grad_a), 1e-12);
    EXPECT_FALSE(layer->weight.grad().defined()) << "the frozen base weight got a gradient";
    EXPECT_FALSE(layer->bias.grad().defined());

    // Central differences on a few entries of A and B.
    torch::NoGradGuard no_grad;
    const auto objective = [&] { return (blockLinear(seams, x, layer->weight, layer->bias) * g).sum().item<double>(); };
    for (const torch::Tensor& p : {adapter.a, adapter.b}) {
      torch::Tensor flat = p.view({-1});
      for (int64_t index : {int64_t{0}, flat.numel() - 1}) {
        const double original = flat[index].item<double>(), step = 1e-6;
        flat[index] = original + step;
        const double up = objective();
        flat[index] = original - step;
        const double down = objective();
        flat[index] = original;
        EXPECT_NEAR(p.grad().view({-1})[index].item<double>(), (up - down) / (2 * step), 1e-6);
      }
    }
  }
}

// A is drawn as PEFT draws it (kaiming-uniform, a = sqrt(5): bound 1/sqrt(in)), B is zeros.
TEST(LoraTest, AdaptersStartAsPeftsDrawsThem) {
  torch::manual_seed(1);
  torch::nn::Linear layer(torch::nn::LinearOptions(400, 300));
  LoraAdapters adapters;
  adapters.add(LoraSite{layer.get(), layer->weight, 0, 300, ""}, config(8, 16, "q"));
  const LoraAdapter& a = adapters.all().at(0);
  const double bound = 1 / std::sqrt(400.0);
  EXPECT_LE(a.a.abs().max().item<double>(), bound);
  EXPECT_NEAR(a.a.std().item<double>(), bound / std::sqrt(3.0), 0.05 * bound);
  EXPECT_EQ(a.b.count_nonzero().item<int64_t>(), 0);
  EXPECT_EQ(a.a.scalar_type(), torch::kFloat);
  EXPECT_TRUE(a.a.requires_grad() && a.b.requires_grad());
}

// At init the adapted model's logits are the base's; every parameter but
// the adapters is frozen, and a backward reaches only the adapters.
TEST(LoraTest, AnAdaptedModelStartsEqualToItsBaseAndTrainsOnlyItsAdapters) {
  const std::pair<const char*, const char*> cases[] = {{"llama", "q,k,v,o,gate,up,down"}, {"gpt2", "q,k,v,o,up,down"}};
  for (const auto& [family, targets] : cases) {
    SCOPED_TRACE(family);
    torch::manual_seed(3);
    const LanguageModelConfig c = tiny(family);
    auto model = createLanguageModel(c);
    const torch::Tensor x = torch::randint(c.vocab_size, {2, 12});
    const torch::Tensor base = model->forward(x).detach();
    const int64_t base_parameters = static_cast<int64_t>(model->parameters().size());
    model->addLora(config(4, 8, targets));
    EXPECT_LT(maxRelativeError(model->forward(x).detach(), base), 1e-6);

    const LoraConfig lora = config(4, 8, targets);
    int64_t adapter_numel = 0;
    for (const torch::Tensor& p : model->parameters()) {
      if (p.requires_grad()) adapter_numel += p.numel();
    }
    EXPECT_EQ(adapter_numel, loraParameterCount(c, lora));
    EXPECT_EQ(static_cast<int64_t>(model->parameters().size()),
              base_parameters + 2 * c.layers * static_cast<int64_t>(lora.targets.size()));
    perturbAdapters(model->lora());
    model->loss(x, x).backward();
    for (const auto& item : model->named_parameters()) {
      const bool adapter = contains(item.key(), ".lora_A") || contains(item.key(), ".lora_B");
      EXPECT_EQ(item.value().requires_grad(), adapter) << item.key();
      EXPECT_EQ(item.value().grad().defined(), adapter) << item.key();
    }
  }
  auto llama = createLanguageModel(tiny("llama"));
  llama->addLora(config(4, 8, "q,v"));
  const auto names = llama->named_parameters();
  EXPECT_EQ(names["layers.1.attention.wv.lora_A"].sizes(), (std::vector<int64_t>{4, 32}));
  EXPECT_EQ(names["layers.1.attention.wv.lora_B"].sizes(), (std::vector<int64_t>{16, 4}));  // kv_heads 2 x 8
  auto gpt2 = createLanguageModel(tiny("gpt2"));
  gpt2->addLora(config(4, 8, "v,down"));
  EXPECT_EQ(gpt2->named_parameters()["transformer.h.0.attn.c_attn.lora_B_v"].sizes(), (std::vector<int64_t>{32, 4}));
  EXPECT_EQ(gpt2->named_parameters()["transformer.h.0.mlp.c_proj.lora_A"].sizes(), (std::vector<int64_t>{4, 128}));
}

// The merged weights W + (alpha / r) B A in a model without adapters give
// the adapted model's logits; the weights no adapter touches are the base's
// bit for bit.
TEST(LoraTest, MergedWeightsComputeWhatTheAdaptedModelDoes) {
  const std::pair<const char*, const char*> cases[] = {{"llama", "q,k,v,o,gate,up,down"}, {"gpt2", "q,v,o,up,down"}};
  for (const auto& [family, targets] : cases) {
    SCOPED_TRACE(family);
    torch::manual_seed(5);
    const LanguageModelConfig c = tiny(family);
    auto adapted = createLanguageModel(c);
    adapted->addLora(config(4, 6, targets));
    torch::NoGradGuard no_grad;
    const torch::Tensor x = torch::randint(c.vocab_size, {2, 12});
    const torch::Tensor base = adapted->forward(x);
    perturbAdapters(adapted->lora());
    auto merged = createLanguageModel(c);
    auto live = adapted->named_parameters();
    for (const auto& [name, value] : mergedParameters(*adapted, adapted->lora())) {
      merged->named_parameters()[name].copy_(value);
      if (!adapted->lora().adapts(live[name])) {
        EXPECT_TRUE(torch::equal(value, live[name])) << name;
      }
    }
    const torch::Tensor want = adapted->forward(x);
    EXPECT_LT(maxRelativeError(merged->forward(x), want), 1e-5);
    EXPECT_GT(maxRelativeError(base, want), 1e-3) << "the adapters changed nothing";
  }
}

TEST(LoraTest, BadConfigsNameTheFlag) {
  auto gpt2 = createLanguageModel(tiny("gpt2"));
  EXPECT_TRUE(contains(configErrorOf([&] { gpt2->addLora(config(4, 8, "q,gate")); }),
                       "--lora-targets q,gate: gpt2 has no 'gate' layer; its targets are q, k, v, o, up, down"));
  EXPECT_TRUE(contains(configErrorOf([&] { gpt2->addLora(config(0, 8, "q")); }), "--lora-rank 0"));
  EXPECT_TRUE(contains(configErrorOf([&] { gpt2->addLora(config(4, 0, "q")); }), "--lora-alpha 0"));
  EXPECT_TRUE(contains(configErrorOf([] { parseLoraTargets("q,x"); }), "--lora-targets 'q,x': 'x' is not a target"));
  EXPECT_TRUE(contains(configErrorOf([] { parseLoraTargets("q,q"); }), "'q' is named twice"));
  EXPECT_TRUE(contains(configErrorOf([] { parseLoraTargets(""); }), "an empty target"));
  gpt2->addLora(config(4, 8, "q"));
  EXPECT_TRUE(contains(configErrorOf([&] { gpt2->addLora(config(4, 8, "k")); }), "has LoRA adapters already"));
  EXPECT_EQ(loraFromMetadata(loraMetadata(config(4, 2.5, "up,down"))).targets,
            (std::vector<LoraTarget>{LoraTarget::kUp, LoraTarget::kDown}));
}

}  // namespace
}  // namespace dtrain::models
