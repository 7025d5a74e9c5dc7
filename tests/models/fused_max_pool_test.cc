// fused::maxPool2d against at::max_pool2d on channels-last CUDA tensors:
// the same outputs, the same gradients in fp32 and within one bf16 step in
// bf16, ties and NaN as libtorch's; what it declines; and a forward +
// backward captured into a CUDA graph. Skipped without a CUDA device or a
// fused build.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <string>
#include <vector>

#include "fused_test_util.h"
#include "models/fused_ops_cuda.h"

#if DTRAIN_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "libtorch/compat.h"
#endif

namespace dtrain::models::testing {
namespace {

struct Pool {
  int64_t kernel, stride, padding;
};

// fused::maxPool2d when it takes the call, else libtorch's.
Operation maxPool(Pool p) {
  return [p](const std::vector<torch::Tensor>& in) {
    if (auto fused = fused::maxPool2d(in[0], p.kernel, p.stride, p.padding)) return std::vector{*fused};
    return std::vector{at::max_pool2d(in[0], {p.kernel, p.kernel}, {p.stride, p.stride}, {p.padding, p.padding})};
  };
}

torch::Tensor toChannelsLast(const torch::Tensor& t) { return t.contiguous(at::MemoryFormat::ChannelsLast); }

torch::Tensor cudaRandn(torch::IntArrayRef sizes, torch::ScalarType dtype) {
  return torch::randn(sizes, torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA)).to(dtype);
}

// Outputs equal (NaN where libtorch's is NaN), of the same dtype and
// channels-last; gradients equal in fp32, within one bf16 step in bf16.
void expectSameAsLibtorchPool(const torch::Tensor& x, Pool p) {
  std::vector<torch::Tensor> probes;
  const OperationRun ref = runOperation(maxPool(p), {x}, /*fused=*/false, probes);
  const OperationRun got = runOperation(maxPool(p), {x}, /*fused=*/true, probes);
  EXPECT_FALSE(ref.reached_fused);
  EXPECT_TRUE(got.reached_fused) << "the fused path declined these inputs";
  const torch::Tensor &y = got.outputs[0], &y_ref = ref.outputs[0];
  EXPECT_EQ(y.scalar_type(), x.scalar_type());
  EXPECT_TRUE(y.is_contiguous(at::MemoryFormat::ChannelsLast));
  ASSERT_EQ(y.sizes(), y_ref.sizes());
  EXPECT_TRUE(torch::allclose(y, y_ref, /*rtol=*/0, /*atol=*/0, /*equal_nan=*/true)) << "output";
  const torch::Tensor &dx = got.grads[0], &dx_ref = ref.grads[0];
  ASSERT_TRUE(dx.defined());
  EXPECT_EQ(dx.scalar_type(), x.scalar_type());
  if (x.scalar_type() == torch::kFloat) {
    EXPECT_TRUE(torch::equal(dx, dx_ref)) << "gradient: " << allClose(dx, dx_ref, 0).message();
  } else {
    EXPECT_TRUE(allClose(dx, dx_ref, 1.0 / 256)) << "gradient";
  }
}

class FusedMaxPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DTRAIN_SKIP_WITHOUT_FUSED_KERNELS();
    torch::manual_seed(42);
  }
};

TEST_F(FusedMaxPoolTest, MatchesLibtorch) {
  struct Case {
    std::vector<int64_t> sizes;  // N, C, H, W
    Pool pool;
  };
  const Case cases[] = {
      {{4, 64, 28, 28}, {3, 2, 1}},  // ResNet's stem, smaller
      {{2, 72, 9, 7}, {3, 2, 1}},
      {{3, 3, 15, 17}, {3, 2, 1}},  // 3 channels: the scalar path
      {{2, 64, 9, 7}, {2, 2, 0}},
      {{2, 72, 7, 9}, {3, 1, 1}},
      {{2, 16, 11, 13}, {5, 3, 2}},
      {{1, 8, 13, 12}, {4, 3, 0}},  // the last row is in no window
  };
  for (torch::ScalarType t : {torch::kFloat, torch::kBFloat16}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(c10::str(c10::toString(t), " ", torch::IntArrayRef(c.sizes), " k", c.pool.kernel, " s",
                            c.pool.stride, " p", c.pool.padding));
      expectSameAsLibtorchPool(toChannelsLast(cudaRandn(c.sizes, t)), c.pool);
    }
  }
}

// Few distinct values (most windows tie: the first maximum wins) and NaNs
// (the window's output is NaN, its gradient goes to the last NaN).
TEST_F(FusedMaxPoolTest, TiesAndNanAsLibtorch) {
  for (torch::ScalarType t : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(t));
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA);
    torch::Tensor x = torch::randint(-2, 2, {2, 64, 15, 13}, f32);
    expectSameAsLibtorchPool(toChannelsLast(x.to(t)), {3, 2, 1});
    x = x.masked_fill(torch::rand({2, 64, 15, 13}, f32) < 0.05, std::numeric_limits<double>::quiet_NaN());
    expectSameAsLibtorchPool(toChannelsLast(x.to(t)), {3, 2, 1});
    expectSameAsLibtorchPool(toChannelsLast(x.to(t)), {3, 1, 1});
  }
}

TEST_F(FusedMaxPoolTest, DeclinesWhatTheKernelDoesNotTake) {
  FusedKernelsSwitch on(true);
  const torch::Tensor nchw = cudaRandn({2, 16, 8, 8}, torch::kFloat);
  EXPECT_FALSE(fused::maxPool2d(nchw.cpu(), 3, 2, 1).has_value());                               // CPU
  EXPECT_FALSE(fused::maxPool2d(toChannelsLast(nchw).cpu(), 3, 2, 1).has_value());                 // CPU, channels-last
  EXPECT_FALSE(fused::maxPool2d(nchw, 3, 2, 1).has_value());                                     // NCHW layout
  EXPECT_FALSE(fused::maxPool2d(toChannelsLast(nchw.to(torch::kDouble)), 3, 2, 1).has_value());    // double
  EXPECT_FALSE(fused::maxPool2d(toChannelsLast(nchw.to(torch::kHalf)), 3, 2, 1).has_value());      // fp16
  EXPECT_FALSE(fused::maxPool2d(toChannelsLast(nchw), 9, 1, 0).has_value());                       // kernel above 8
  EXPECT_FALSE(fused::maxPool2d(toChannelsLast(nchw), 3, 2, 2).has_value());                       // padding > k / 2
  EXPECT_FALSE(fused::maxPool2d(toChannelsLast(nchw), 3, 0, 1).has_value());                       // stride 0
  EXPECT_FALSE(fused::maxPool2d(toChannelsLast(cudaRandn({2, 16, 2, 2}, torch::kFloat)), 3, 1, 0)
                   .has_value());                                                                 // no output
  EXPECT_FALSE(fused::maxPool2d(cudaRandn({16, 8, 8}, torch::kFloat), 3, 2, 1).has_value());    // 3-D
  EXPECT_TRUE(fused::maxPool2d(toChannelsLast(nchw), 3, 2, 1).has_value());
  FusedKernelsSwitch off(false);
  EXPECT_FALSE(fused::maxPool2d(toChannelsLast(nchw), 3, 2, 1).has_value());  // DTRAIN_FUSED_KERNELS=0
}

#if DTRAIN_TORCH_CUDA

// bf16, forward and backward captured into a CUDA graph: every replay
// gives the eager bits.
TEST(FusedMaxPoolGraphTest, ForwardAndBackwardCaptureIntoACudaGraphAndReplay) {
  DTRAIN_SKIP_WITHOUT_FUSED_KERNELS();
  FusedKernelsSwitch on(true);
  torch::manual_seed(6);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA);
  const torch::Tensor x =
      toChannelsLast(torch::randn({8, 64, 56, 56}, f32).to(torch::kBFloat16)).requires_grad_(true);
  const torch::Tensor probe = torch::randn({8, 64, 28, 28}, f32);
  auto step = [&] {
    const auto y = fused::maxPool2d(x, 3, 2, 1);
    EXPECT_TRUE(y.has_value());
    (y->to(torch::kFloat) * probe).sum().backward();
    return y->detach();
  };
  // Eager on a side stream (graphs cannot capture the default stream); the
  // warm-up creates the gradient, which the captured backward accumulates into.
  c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool());
  const torch::Tensor eager_y = step().clone();
  const torch::Tensor eager_dx = x.grad().clone();
  x.grad().zero_();
  torch::cuda::synchronize();

  at::cuda::CUDAGraph graph;
  compat::beginGraphCapture(graph);
  const torch::Tensor y = step();
  graph.capture_end();
  for (int replay = 0; replay < 2; ++replay) {
    x.grad().zero_();
    graph.replay();
    torch::cuda::synchronize();
    EXPECT_TRUE(torch::equal(y, eager_y)) << "replay " << replay;
    EXPECT_TRUE(torch::equal(x.grad(), eager_dx)) << "replay " << replay;
  }
}

#else

TEST(FusedMaxPoolGraphTest, ForwardAndBackwardCaptureIntoACudaGraphAndReplay) {
  GTEST_SKIP() << "this build's libtorch has no CUDA (no CUDA graphs)";
}

#endif

}  // namespace
}  // namespace dtrain::models::testing
