// Each fused CUDA operation (fused_ops_cuda.h, taken by transformer_ops.h)
// against the libtorch operation on the same inputs, forward and backward,
// in fp32, bf16 and under bf16 autocast, at odd sizes. Skipped without a
// CUDA device or in a build without the fused kernels.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fused_test_util.h"
#include "models/fused_ops_cuda.h"
#include "models/transformer_ops.h"
#include "tests/models/tensor_compare.h"

namespace dtrain::models::testing {
namespace {

// fp32: the kernels' sums run in other orders than libtorch's (forward
// 1e-5; backward reductions over rows a little more). bf16: each path rounds
// intermediates to bf16 at other places (2^-9 each).
constexpr double kFp32Forward = 1e-5, kFp32Backward = 1e-4, kBf16 = 2e-2;
// A weight gradient summed over ~10k rows of bf16 logit gradients: both
// sides round those to bf16 at different points, which moves a few dozen of
// millions of elements by ~3% of the gradient's RMS (measured on an H100);
// a chunking error would move whole rows by 100%.
constexpr double kBf16AccumulatedGradient = 5e-2;

torch::Tensor cuda(torch::IntArrayRef sizes, torch::ScalarType dtype, double scale = 1, double offset = 0) {
  return (torch::randn(sizes, torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA)) * scale + offset)
      .to(dtype);
}

class FusedOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DTRAIN_SKIP_WITHOUT_FUSED_KERNELS();
    torch::manual_seed(42);
  }
};

double forwardTolerance(torch::ScalarType t) { return t == torch::kFloat ? kFp32Forward : kBf16; }
double backwardTolerance(torch::ScalarType t) { return t == torch::kFloat ? kFp32Backward : kBf16; }

TEST_F(FusedOpsTest, LayerNormAndResidualAdd) {
  for (torch::ScalarType t : {torch::kFloat, torch::kBFloat16}) {
    for (int64_t cols : {200, 1001, 4104}) {  // vector path, scalar path, a long row
      SCOPED_TRACE(std::string(c10::toString(t)) + " cols " + std::to_string(cols));
      const auto x = cuda({3, 37, cols}, t), update = cuda({3, 37, cols}, t);
      const auto w = cuda({cols}, t, 0.2, 1), b = cuda({cols}, t, 0.1);
      expectSameAsLibtorch([](const auto& in) { return std::vector{ops::layerNorm(in[0], in[1], in[2], 1e-5)}; },
                           {x, w, b}, forwardTolerance(t), backwardTolerance(t));
      expectSameAsLibtorch(
          [](const auto& in) {
            const ops::ResidualAndNormed r = ops::addLayerNorm(in[0], in[1], in[2], in[3], 1e-5);
            return std::vector{r.residual, r.normed};
          },
          {x, update, w, b}, forwardTolerance(t), backwardTolerance(t));
    }
  }
}

// GPT-2 under autocast: an fp32 residual stream, bf16 branch outputs, fp32
// norms (layer_norm is on autocast's fp32 list).
TEST_F(FusedOpsTest, ResidualAddOfABf16UpdateUnderAutocast) {
  const auto x = cuda({2, 29, 768}, torch::kFloat), update = cuda({2, 29, 768}, torch::kBFloat16);
  const auto w = cuda({768}, torch::kFloat, 0.2, 1), b = cuda({768}, torch::kFloat, 0.1);
  expectSameAsLibtorch(
      [](const auto& in) {
        const ops::ResidualAndNormed r = ops::addLayerNorm(in[0], in[1], in[2], in[3], 1e-5);
        return std::vector{r.residual, r.normed, ops::layerNorm(r.residual, in[2], in[3], 1e-5)};
      },
      {x, update, w, b}, kFp32Forward, kBf16, /*autocast=*/true);
}

TEST_F(FusedOpsTest, RmsNormAndResidualAdd) {
  // (activations, weight): the kernels' three pairs.
  const std::pair<torch::ScalarType, torch::ScalarType> types[] = {
      {torch::kFloat, torch::kFloat}, {torch::kBFloat16, torch::kBFloat16}, {torch::kBFloat16, torch::kFloat}};
  for (auto [t, wt] : types) {
    for (int64_t cols : {256, 1001}) {
      SCOPED_TRACE(std::string(c10::toString(t)) + "/" + c10::toString(wt) + " cols " + std::to_string(cols));
      const auto x = cuda({5, 23, cols}, t), update = cuda({5, 23, cols}, t), w = cuda({cols}, wt, 0.2, 1);
      expectSameAsLibtorch([](const auto& in) { return std::vector{ops::rmsNorm(in[0], in[1], 1e-5)}; }, {x, w},
                           forwardTolerance(t), backwardTolerance(t));
      expectSameAsLibtorch(
          [](const auto& in) {
            const ops::ResidualAndNormed r = ops::addRmsNorm(in[0], in[1], in[2], 1e-5);
            return std::vector{r.residual, r.normed};
          },
          {x, update, w}, forwardTolerance(t), backwardTolerance(t));
    }
  }
}

TEST_F(FusedOpsTest, LinearGelu) {
  for (torch::ScalarType t : {torch::kFloat, torch::kBFloat16}) {
    for (int64_t out : {200, 1001}) {
      SCOPED_TRACE(std::string(c10::toString(t)) + " out " + std::to_string(out));
      const auto x = cuda({2, 33, 96}, t), w = cuda({out, 96}, t, 0.1), b = cuda({out}, t, 0.5);
      expectSameAsLibtorch([](const auto& in) { return std::vector{ops::linearGelu(in[0], in[1], in[2])}; },
                           {x, w, b}, forwardTolerance(t), backwardTolerance(t));
    }
  }
}

// fp32 master weights under autocast: a bf16 product, the fp32 bias added in
// the kernel (the libtorch path adds it in bf16).
TEST_F(FusedOpsTest, LinearGeluUnderAutocast) {
  const auto x = cuda({4, 17, 64}, torch::kFloat), w = cuda({256, 64}, torch::kFloat, 0.1);
  const auto b = cuda({256}, torch::kFloat, 0.5);
  expectSameAsLibtorch([](const auto& in) { return std::vector{ops::linearGelu(in[0], in[1], in[2])}; }, {x, w, b},
                       kBf16, kBf16, /*autocast=*/true);
}

// GPT-2's MLP, whose backward writes the GELU's output again instead of
// keeping it: every gradient (both weights, both biases, x) as libtorch's.
TEST_F(FusedOpsTest, GeluMlp) {
  for (torch::ScalarType t : {torch::kFloat, torch::kBFloat16}) {
    for (int64_t ffn : {256, 1001}) {
      SCOPED_TRACE(std::string(c10::toString(t)) + " ffn " + std::to_string(ffn));
      const auto x = cuda({2, 33, 96}, t), fc_w = cuda({ffn, 96}, t, 0.1), fc_b = cuda({ffn}, t, 0.5);
      const auto proj_w = cuda({96, ffn}, t, 0.05), proj_b = cuda({96}, t, 0.1);
      expectSameAsLibtorch(
          [](const auto& in) { return std::vector{ops::geluMlp(in[0], in[1], in[2], in[3], in[4])}; },
          {x, fc_w, fc_b, proj_w, proj_b}, forwardTolerance(t), backwardTolerance(t));
    }
  }
}

TEST_F(FusedOpsTest, GeluMlpUnderAutocast) {
  const auto x = cuda({4, 17, 64}, torch::kFloat), fc_w = cuda({256, 64}, torch::kFloat, 0.1);
  const auto fc_b = cuda({256}, torch::kFloat, 0.5), proj_w = cuda({64, 256}, torch::kFloat, 0.05);
  const auto proj_b = cuda({64}, torch::kFloat, 0.1);
  expectSameAsLibtorch([](const auto& in) { return std::vector{ops::geluMlp(in[0], in[1], in[2], in[3], in[4])}; },
                       {x, fc_w, fc_b, proj_w, proj_b}, kBf16, kBf16, /*autocast=*/true);
}

TEST_F(FusedOpsTest, Swiglu) {
  for (torch::ScalarType t : {torch::kFloat, torch::kBFloat16}) {
    for (int64_t ffn : {136, 1001}) {
      SCOPED_TRACE(std::string(c10::toString(t)) + " ffn " + std::to_string(ffn));
      const auto gate = cuda({5, 31, ffn}, t, 2), up = cuda({5, 31, ffn}, t);
      expectSameAsLibtorch([](const auto& in) { return std::vector{ops::swiglu(in[0], in[1])}; }, {gate, up},
                           forwardTolerance(t), backwardTolerance(t));
    }
  }
}

TEST_F(FusedOpsTest, Rotary) {
  for (torch::ScalarType t : {torch::kFloat, torch::kBFloat16}) {
    for (int64_t head_dim : {64, 6}) {
      SCOPED_TRACE(std::string(c10::toString(t)) + " head_dim " + std::to_string(head_dim));
      const ops::RotaryTable table = ops::rotaryTable(64, head_dim, 10000.0, torch::kCUDA);
      ASSERT_TRUE(table.inv_freq.defined());
      const auto x = cuda({2, 37, 3, head_dim}, t);
      expectSameAsLibtorch([&](const auto& in) { return std::vector{ops::applyRotary(in[0], table)}; }, {x},
                           forwardTolerance(t), backwardTolerance(t));
    }
  }
}

// A table whose rows start elsewhere (a KV cache's offset) has no inv_freq:
// the libtorch path takes it.
TEST_F(FusedOpsTest, RotaryWithoutFrequenciesDeclines) {
  const ops::RotaryTable full = ops::rotaryTable(64, 16, 10000.0, torch::kCUDA);
  const ops::RotaryTable rows{full.cos.narrow(0, 5, 10), full.sin.narrow(0, 5, 10)};
  const auto x = cuda({1, 10, 2, 16}, torch::kFloat);
  FusedKernelsSwitch on(true);
  EXPECT_FALSE(fused::applyRotary(x, rows).has_value());
}

torch::Tensor targetsFor(torch::IntArrayRef sizes, int64_t vocab) {
  torch::Tensor targets = torch::randint(vocab, sizes, torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA));
  targets.view(-1).narrow(0, 3, 2).fill_(-100);  // two rows that do not count
  return targets;
}

TEST_F(FusedOpsTest, ClassifierCrossEntropy) {
  for (torch::ScalarType t : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(t));
    const int64_t vocab = 1001;  // odd: the chunk buffer pads its rows
    const auto hidden = cuda({3, 29, 64}, t), w = cuda({vocab, 64}, t, 0.3);
    const auto targets = targetsFor({3, 29}, vocab);
    expectSameAsLibtorch(
        [](const auto& in) { return std::vector{ops::classifierCrossEntropy(in[0], in[1], in[2])}; },
        {hidden, w, targets}, forwardTolerance(t), backwardTolerance(t));
  }
}

// GPT-2's shape under autocast, over three chunks of rows (the logits of
// one chunk are capped at 512 MiB: 5312 rows of 50304 padded bf16 columns).
TEST_F(FusedOpsTest, ClassifierCrossEntropyOverSeveralChunksUnderAutocast) {
  const int64_t vocab = 50257, rows = 2 * 5312 + 77;
  const auto hidden = cuda({rows, 64}, torch::kFloat), w = cuda({vocab, 64}, torch::kFloat, 0.3);
  const auto targets = targetsFor({rows}, vocab);
  expectSameAsLibtorch([](const auto& in) { return std::vector{ops::classifierCrossEntropy(in[0], in[1], in[2])}; },
                       {hidden, w, targets}, kBf16, kBf16AccumulatedGradient, /*autocast=*/true);
}

TEST_F(FusedOpsTest, ClassifierCrossEntropyWithoutGradientsComputesTheLossOnly) {
  const auto hidden = cuda({40, 32}, torch::kFloat), w = cuda({77, 32}, torch::kFloat);
  const auto targets = targetsFor({40}, 77);
  torch::NoGradGuard no_grad;
  torch::Tensor ref, got;
  {
    FusedKernelsSwitch off(false);
    ref = ops::classifierCrossEntropy(hidden, w, targets);
  }
  {
    FusedKernelsSwitch on(true);
    got = ops::classifierCrossEntropy(hidden, w, targets);
  }
  EXPECT_TRUE(allClose(got, ref, kFp32Forward));
  EXPECT_EQ(got.dim(), 0);
}

// The loss's gradient scales both gradients (a loss divided over
// micro-batches), and a second backward is refused, not silently doubled.
TEST_F(FusedOpsTest, ClassifierCrossEntropyScalesByTheLossGradientOnce) {
  FusedKernelsSwitch on(true);
  const auto hidden = cuda({40, 32}, torch::kFloat).requires_grad_(true);
  const auto w = cuda({77, 32}, torch::kFloat).requires_grad_(true);
  const auto targets = targetsFor({40}, 77);
  torch::Tensor loss = ops::classifierCrossEntropy(hidden, w, targets);
  (loss * 0.25).backward({}, /*retain_graph=*/true);
  const torch::Tensor quarter = hidden.grad().clone();
  hidden.grad().zero_();
  EXPECT_THROW((loss * 0.25).backward(), c10::Error);
  loss = ops::classifierCrossEntropy(hidden, w, targets);
  loss.backward();
  EXPECT_TRUE(allClose(quarter * 4, hidden.grad(), kFp32Forward));
}

// ResNet's BN (+ shortcut) (+ ReLU), channels-last: fused::batchNormAct
// when it takes the call, else torch::batch_norm, + residual, relu (the
// libtorch path). Outputs y and the running statistics after the call; the
// inputs are x, weight, bias (and the residual).
std::vector<torch::Tensor> batchNormAct(const std::vector<torch::Tensor>& in, const torch::Tensor& running_mean,
                                        const torch::Tensor& running_var, bool training, bool relu) {
  torch::Tensor rm = running_mean.clone(), rv = running_var.clone();
  const torch::Tensor residual = in.size() > 3 ? in[3] : torch::Tensor();
  torch::Tensor y;
  if (auto fused = fused::batchNormAct(in[0], residual, in[1], in[2], rm, rv, training, 0.1, 1e-5, relu)) {
    y = *fused;
  } else {
    y = torch::batch_norm(in[0], in[1], in[2], rm, rv, training, 0.1, 1e-5, /*cudnn_enabled=*/true);
    if (residual.defined()) y = y + residual;
    if (relu) y = torch::relu(y);
  }
  return {y, rm, rv};
}

torch::Tensor channelsLast(torch::Tensor t) { return t.contiguous(at::MemoryFormat::ChannelsLast); }

// bf16 with ReLU: the two paths round at other places (the fused one
// rounds BN + add + ReLU once, libtorch's after each operation), so a few
// pre-activations near zero fall on the other side of ReLU's mask on one
// path only, and neither path is the reference. Both are compared with the
// same operation in fp32 (libtorch, the inputs widened): the fused path must
// be at least as close to it as libtorch's bf16 path (within 25%, plus 1e-3),
// outputs and gradients, by ||got - fp32|| / ||fp32||.
void expectAtLeastAsAccurateAsLibtorch(const Operation& op, const std::vector<torch::Tensor>& in, bool autocast) {
  std::vector<torch::Tensor> wide;
  for (const torch::Tensor& t : in) wide.push_back(t.to(torch::kFloat));  // keeps the memory format
  std::vector<torch::Tensor> probes;
  const OperationRun exact = runOperation(op, wide, /*fused=*/false, probes);
  const OperationRun ref = runOperation(op, in, /*fused=*/false, probes, autocast);
  const OperationRun got = runOperation(op, in, /*fused=*/true, probes, autocast);
  EXPECT_TRUE(got.reached_fused);
  const auto check = [](const torch::Tensor& g, const torch::Tensor& r, const torch::Tensor& e,
                         const std::string& what) {
    const double fused_error = normRelativeError(g, e), libtorch_error = normRelativeError(r, e);
    EXPECT_LE(fused_error, 1.25 * libtorch_error + 1e-3)
        << what << ": fused bf16 " << fused_error << " from fp32, libtorch bf16 " << libtorch_error;
  };
  for (size_t i = 0; i < exact.outputs.size(); ++i) {
    check(got.outputs[i], ref.outputs[i], exact.outputs[i], "output " + std::to_string(i));
  }
  for (size_t i = 0; i < exact.grads.size(); ++i) {
    check(got.grads[i], ref.grads[i], exact.grads[i], "gradient of input " + std::to_string(i));
  }
}

TEST_F(FusedOpsTest, BatchNormAct) {
  for (torch::ScalarType t : {torch::kFloat, torch::kBFloat16}) {
    for (bool training : {true, false}) {
      for (auto [residual, relu] : {std::pair{false, false}, {false, true}, {true, true}, {true, false}}) {
        for (int64_t channels : {64, 37}) {  // vector path, scalar path
          SCOPED_TRACE(std::string(c10::toString(t)) + (training ? " training" : " eval") +
                       (residual ? " residual" : "") + (relu ? " relu" : "") + " channels " +
                       std::to_string(channels));
          std::vector<torch::Tensor> in = {channelsLast(cuda({4, channels, 9, 7}, t, 1.5, 0.5)),
                                           cuda({channels}, torch::kFloat, 0.2, 1),
                                           cuda({channels}, torch::kFloat, 0.2)};
          if (residual) in.push_back(channelsLast(cuda({4, channels, 9, 7}, t)));
          const torch::Tensor rm = cuda({channels}, torch::kFloat, 0.5), rv = cuda({channels}, torch::kFloat, 0.1, 1);
          const bool with_relu = relu;  // a structured binding: not capturable before C++20
          const Operation op = [&](const auto& x) { return batchNormAct(x, rm, rv, training, with_relu); };
          if (t == torch::kFloat || !relu) {
            expectSameAsLibtorch(op, in, forwardTolerance(t), backwardTolerance(t));
            continue;
          }
          expectAtLeastAsAccurateAsLibtorch(op, in, /*autocast=*/false);
        }
      }
    }
  }
}

// ResNet under bf16 autocast: bf16 convolution outputs, fp32 parameters and
// running statistics; batch_norm runs in the input's dtype (autocast leaves
// it alone), and so does the fused kernel.
TEST_F(FusedOpsTest, BatchNormActUnderAutocast) {
  std::vector<torch::Tensor> in = {channelsLast(cuda({8, 128, 7, 7}, torch::kBFloat16, 2, -0.5)),
                                   cuda({128}, torch::kFloat, 0.2, 1), cuda({128}, torch::kFloat, 0.2),
                                   channelsLast(cuda({8, 128, 7, 7}, torch::kBFloat16))};
  const torch::Tensor rm = cuda({128}, torch::kFloat, 0.5), rv = cuda({128}, torch::kFloat, 0.1, 1);
  // No ReLU: gradients element by element (ReLU's mask is covered above).
  expectSameAsLibtorch([&](const auto& x) { return batchNormAct(x, rm, rv, true, false); }, in, kBf16, kBf16,
                       /*autocast=*/true);
  std::vector<torch::Tensor> probes;
  const Operation op = [&](const auto& x) { return batchNormAct(x, rm, rv, true, true); };
  const OperationRun got = runOperation(op, in, true, probes, /*autocast=*/true);
  EXPECT_EQ(got.outputs[0].scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(got.outputs[0].is_contiguous(at::MemoryFormat::ChannelsLast));
  expectAtLeastAsAccurateAsLibtorch(op, in, /*autocast=*/true);
}

TEST_F(FusedOpsTest, BatchNormActDeclinesWhatTheKernelDoesNotTake) {
  FusedKernelsSwitch on(true);
  torch::Tensor rm = cuda({16}, torch::kFloat), rv = cuda({16}, torch::kFloat, 0.1, 1);
  const auto w = cuda({16}, torch::kFloat), b = cuda({16}, torch::kFloat);
  const auto nchw = cuda({2, 16, 5, 5}, torch::kFloat);
  EXPECT_FALSE(fused::batchNormAct(nchw, {}, w, b, rm, rv, true, 0.1, 1e-5, true).has_value());  // NCHW layout
  EXPECT_FALSE(fused::batchNormAct(channelsLast(nchw).to(torch::kHalf), {}, w, b, rm, rv, true, 0.1, 1e-5, true)
                   .has_value());  // fp16
  EXPECT_FALSE(fused::batchNormAct(channelsLast(cuda({1, 16, 1, 1}, torch::kFloat)), {}, w, b, rm, rv, true, 0.1,
                                   1e-5, true)
                   .has_value());  // one value per channel in training
  EXPECT_FALSE(fused::batchNormAct(channelsLast(nchw), nchw, w, b, rm, rv, true, 0.1, 1e-5, true)
                   .has_value());  // residual in another layout
  EXPECT_TRUE(fused::batchNormAct(channelsLast(nchw), channelsLast(nchw), w, b, rm, rv, true, 0.1, 1e-5, true)
                  .has_value());
}

TEST_F(FusedOpsTest, DoubleAndCpuTensorsTakeTheLibtorchPath) {
  FusedKernelsSwitch on(true);
  const auto w = torch::ones({8}, torch::kDouble).cuda();
  EXPECT_FALSE(fused::rmsNorm(torch::randn({4, 8}, torch::kDouble).cuda(), w, 1e-5).has_value());
  EXPECT_FALSE(fused::rmsNorm(torch::randn({4, 8}), torch::ones({8}), 1e-5).has_value());
  EXPECT_FALSE(fused::swiglu(torch::randn({4, 8}).cuda().to(torch::kHalf), torch::randn({4, 8}).cuda().to(torch::kHalf))
                   .has_value());
}

}  // namespace
}  // namespace dtrain::models::testing
