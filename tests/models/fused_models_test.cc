// Whole tiny gpt2 and llama models with the fused CUDA operations against
// the same models with DTRAIN_FUSED_KERNELS=0 (loss and gradients, fp32 and
// bf16 autocast), and a fused forward + backward captured into a CUDA graph
// and replayed. Skipped without a CUDA device or a fused build.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>

#include "fused_test_util.h"
#include "models/language_model.h"
#include "models/transformer_ops.h"

#if DTRAIN_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "libtorch/compat.h"
#endif

namespace dtrain::models::testing {
namespace {

LanguageModelConfig tinyFused(const std::string& family) {
  LanguageModelOverrides o;
  o.layers = 2;
  o.dim = 64;
  o.heads = 4;
  if (family == "llama") o.kv_heads = 2;
  o.seq_len = 24;
  o.vocab_size = 97;  // odd
  o.tie_embeddings = family == "gpt2";
  return namedLanguageModel(family, o);
}

struct ModelRun {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;
  bool fused_loss = false;
};

// The same weights (seeded), batch and targets each time.
ModelRun lossAndGradients(const LanguageModelConfig& config, bool fused, bool autocast) {
  FusedKernelsSwitch on(fused);
  torch::manual_seed(3);
  auto model = createLanguageModel(config);
  model->to(torch::kCUDA);
  const auto longs = torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA);
  const torch::Tensor tokens = torch::randint(config.vocab_size, {3, config.seq_len}, longs);
  const torch::Tensor targets = torch::randint(config.vocab_size, {3, config.seq_len}, longs);
  ModelRun run;
  torch::Tensor loss;
  {
    std::optional<Bf16Autocast> scope;
    if (autocast) scope.emplace();
    loss = model->loss(tokens, targets);
  }
  run.fused_loss = reachesFused(loss);
  loss.backward();
  run.loss = loss.item<double>();
  for (const auto& p : model->named_parameters()) run.grads[p.key()] = p.value().grad().clone();
  return run;
}

torch::Tensor flatGradients(const ModelRun& run) {
  std::vector<torch::Tensor> parts;
  for (const auto& [name, g] : run.grads) parts.push_back(g.flatten().to(torch::kDouble));
  return torch::cat(parts);
}

class FusedModelsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { DTRAIN_SKIP_WITHOUT_FUSED_KERNELS(); }
};

TEST_P(FusedModelsTest, Fp32LossAndGradientsMatchTheLibtorchPath) {
  const LanguageModelConfig config = tinyFused(GetParam());
  const ModelRun ref = lossAndGradients(config, false, false);
  const ModelRun got = lossAndGradients(config, true, false);
  EXPECT_FALSE(ref.fused_loss);
  EXPECT_TRUE(got.fused_loss);
  EXPECT_NEAR(got.loss, ref.loss, 1e-5 * ref.loss);
  for (const auto& [name, g] : ref.grads) EXPECT_TRUE(allClose(got.grads.at(name), g, 1e-3)) << name;
}

// bf16 rounds differently on each path: the loss to bf16 accuracy, the
// gradient as a whole (norm and direction).
TEST_P(FusedModelsTest, Bf16AutocastLossAndGradientsMatchTheLibtorchPath) {
  const LanguageModelConfig config = tinyFused(GetParam());
  const ModelRun ref = lossAndGradients(config, false, true);
  const ModelRun got = lossAndGradients(config, true, true);
  EXPECT_TRUE(got.fused_loss);
  EXPECT_NEAR(got.loss, ref.loss, 1e-2 * ref.loss);
  const torch::Tensor a = flatGradients(got), b = flatGradients(ref);
  const double norm_a = a.norm().item<double>(), norm_b = b.norm().item<double>();
  EXPECT_NEAR(norm_a, norm_b, 2e-2 * norm_b);
  EXPECT_GT(a.dot(b).item<double>() / (norm_a * norm_b), 0.999);
}

INSTANTIATE_TEST_SUITE_P(Families, FusedModelsTest, ::testing::Values("gpt2", "llama"));

#if DTRAIN_TORCH_CUDA

// One pre-norm block of each family plus the head, over leaf tensors, from
// transformer_ops alone (every fused operation; no embedding backward,
// which is libtorch's business).
torch::Tensor blocksAndLoss(const std::vector<torch::Tensor>& p, const ops::RotaryTable& table,
                            const torch::Tensor& targets) {
  const torch::Tensor &x = p[0], &ln_w = p[1], &ln_b = p[2], &fc_w = p[3], &fc_b = p[4], &proj = p[5];
  const torch::Tensor &rms_w = p[6], &gate_w = p[7], &up_w = p[8], &down_w = p[9], &head = p[10];
  const int64_t batch = x.size(0), seq = x.size(1), dim = x.size(2);
  // gpt2: ln, mlp, residual add + ln.
  const torch::Tensor mlp = torch::matmul(ops::linearGelu(ops::layerNorm(x, ln_w, ln_b, 1e-5), fc_w, fc_b), proj.t());
  const ops::ResidualAndNormed mid = ops::addLayerNorm(x, mlp, ln_w, ln_b, 1e-5);
  // llama: rotary on heads, rms, swiglu, residual add + rms.
  const torch::Tensor rotated = ops::applyRotary(mid.normed.view({batch, seq, 4, dim / 4}), table).view_as(x);
  const torch::Tensor h = ops::rmsNorm(rotated, rms_w, 1e-5);
  const torch::Tensor ffn = torch::matmul(ops::swiglu(torch::matmul(h, gate_w.t()), torch::matmul(h, up_w.t())),
                                          down_w.t());
  const ops::ResidualAndNormed out = ops::addRmsNorm(mid.residual, ffn, rms_w, 1e-5);
  return ops::classifierCrossEntropy(out.normed, head, targets);
}

TEST(FusedGraphTest, ForwardAndBackwardCaptureIntoACudaGraphAndReplay) {
  DTRAIN_SKIP_WITHOUT_FUSED_KERNELS();
  FusedKernelsSwitch on(true);
  torch::manual_seed(5);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA);
  const int64_t dim = 64, ffn = 136, vocab = 97;
  std::vector<torch::Tensor> params;
  for (auto sizes : std::vector<std::vector<int64_t>>{{3, 24, dim}, {dim}, {dim}, {4 * dim, dim}, {4 * dim},
                                                     {dim, 4 * dim}, {dim}, {ffn, dim}, {ffn, dim}, {dim, ffn},
                                                     {vocab, dim}}) {
    params.push_back((torch::randn(sizes, f32) * 0.2).requires_grad_(true));
  }
  const torch::Tensor targets = torch::randint(vocab, {3, 24}, f32.dtype(torch::kLong));
  const ops::RotaryTable table = ops::rotaryTable(24, dim / 4, 10000.0, torch::kCUDA);

  // Eager on a side stream (graphs cannot capture the default stream); the
  // warm-up also creates every gradient, which the captured backward then
  // accumulates into in place.
  c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool());
  torch::Tensor eager_loss = blocksAndLoss(params, table, targets);
  eager_loss.backward();
  std::vector<torch::Tensor> eager;
  for (auto& p : params) {
    eager.push_back(p.grad().clone());
    p.grad().zero_();
  }
  torch::cuda::synchronize();

  at::cuda::CUDAGraph graph;
  compat::beginGraphCapture(graph);
  torch::Tensor loss = blocksAndLoss(params, table, targets);
  loss.backward();
  graph.capture_end();
  for (int replay = 0; replay < 2; ++replay) {
    for (auto& p : params) p.grad().zero_();
    graph.replay();
    torch::cuda::synchronize();
    // The same kernels in the same order: equal up to cuBLAS's choices.
    EXPECT_TRUE(allClose(loss, eager_loss, 1e-6)) << "replay " << replay;
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(allClose(params[i].grad(), eager[i], 1e-6)) << "param " << i << " replay " << replay;
    }
  }
  EXPECT_TRUE(reachesFused(loss));
}

#else

TEST(FusedGraphTest, ForwardAndBackwardCaptureIntoACudaGraphAndReplay) {
  GTEST_SKIP() << "this build's libtorch has no CUDA (no CUDA graphs)";
}

#endif

}  // namespace
}  // namespace dtrain::models::testing
