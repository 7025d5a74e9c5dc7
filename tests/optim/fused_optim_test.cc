// AdamW's capturable step and clipGradNormOnDevice with the fused kernels
// (models/kernels/optimizer.h) against the same calls with
// DTRAIN_FUSED_KERNELS=0 (the torch operations), on a GPU; and a fused step
// captured into a CUDA graph and replayed with new learning rates. Skipped
// without a CUDA device or in a build without the fused kernels.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/settings.h"
#include "dtrain/optim.h"

#if DTRAIN_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "libtorch/compat.h"
#endif

namespace dtrain {
namespace {

#define DTRAIN_SKIP_WITHOUT_FUSED_ADAMW()                                                         \
  do {                                                                                            \
    if (!kFusedAdamWBuilt) GTEST_SKIP() << "this build has no fused AdamW (a CPU libtorch or no nvcc)"; \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";                          \
  } while (0)

#if DTRAIN_FUSED_ADAMW
constexpr bool kFusedAdamWBuilt = true;
#else
constexpr bool kFusedAdamWBuilt = false;
#endif

// DTRAIN_FUSED_KERNELS for the scope, the cached setting forgotten.
class FusedSwitch {
 public:
  explicit FusedSwitch(bool on) {
    if (const char* v = std::getenv("DTRAIN_FUSED_KERNELS")) previous_ = v;
    setenv("DTRAIN_FUSED_KERNELS", on ? "1" : "0", 1);
    forget();
  }
  ~FusedSwitch() {
    if (previous_) {
      setenv("DTRAIN_FUSED_KERNELS", previous_->c_str(), 1);
    } else {
      unsetenv("DTRAIN_FUSED_KERNELS");
    }
    forget();
  }

 private:
  static void forget() {
    for (const SettingBase* s : allSettings()) {
      if (s->env() == "DTRAIN_FUSED_KERNELS") s->reset();
    }
  }
  std::optional<std::string> previous_;
};

// Three slabs as DataParallel keeps them: a large decayed one, a small one
// exempt from decay, and one that starts 4 bytes into its buffer (the
// kernel's scalar path).
std::vector<FlatSlab> makeSlabs() {
  torch::manual_seed(11);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA);
  std::vector<FlatSlab> slabs;
  slabs.push_back({torch::randn({1000003}, f32), torch::zeros({1000003}, f32), true});
  slabs.push_back({torch::randn({77}, f32), torch::zeros({77}, f32), false});
  slabs.push_back({torch::randn({4097}, f32).narrow(0, 1, 4096), torch::zeros({4097}, f32).narrow(0, 1, 4096), true});
  return slabs;
}

void setGrads(const std::vector<FlatSlab>& slabs, int step) {
  torch::manual_seed(100 + step);
  for (const FlatSlab& s : slabs) s.grad.copy_(torch::randn(s.grad.sizes(), s.grad.options()));
}

struct AdamWResult {
  std::vector<torch::Tensor> params;
  std::map<std::string, torch::Tensor> state;
};

AdamWResult runAdamW(bool fused, int steps) {
  FusedSwitch on(fused);
  std::vector<FlatSlab> slabs = makeSlabs();
  auto opt = makeAdamW(slabs, {.lr = 1e-2, .weight_decay = 0.1});
  opt->setCapturable(true);
  for (int step = 1; step <= steps; ++step) {
    setGrads(slabs, step);
    opt->setLr(1e-2 / step);
    opt->step();
    opt->countStep();
  }
  AdamWResult r;
  for (const FlatSlab& s : slabs) r.params.push_back(s.param.cpu());
  for (const auto& [key, t] : opt->stateDict()) r.state[key] = t.cpu();
  return r;
}

double maxRelativeDifference(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a.to(torch::kDouble) - b.to(torch::kDouble)).abs() / (b.to(torch::kDouble).abs() + 1e-3)).max().item<double>();
}

TEST(FusedAdamWTest, CapturableStepsMatchTheTorchOperations) {
  DTRAIN_SKIP_WITHOUT_FUSED_ADAMW();
  const AdamWResult ref = runAdamW(false, 4), got = runAdamW(true, 4);
  for (size_t i = 0; i < ref.params.size(); ++i) {
    EXPECT_LT(maxRelativeDifference(got.params[i], ref.params[i]), 1e-5) << "slab " << i;
  }
  ASSERT_EQ(got.state.size(), ref.state.size());
  for (const auto& [key, t] : ref.state) {
    ASSERT_TRUE(got.state.count(key)) << key;
    EXPECT_EQ(got.state.at(key).scalar_type(), t.scalar_type()) << key;
    EXPECT_LT(maxRelativeDifference(got.state.at(key), t), 1e-5) << key;
  }
}

TEST(FusedAdamWTest, ClipGradNormMatchesTheTorchOperations) {
  DTRAIN_SKIP_WITHOUT_FUSED_ADAMW();
  double norms[2];
  std::vector<torch::Tensor> clipped[2];
  for (bool fused : {false, true}) {
    FusedSwitch on(fused);
    std::vector<FlatSlab> slabs = makeSlabs();
    setGrads(slabs, 1);
    norms[fused] = clipGradNormOnDevice(slabs, 1.0).item<double>();
    for (const FlatSlab& s : slabs) clipped[fused].push_back(s.grad.cpu());
  }
  EXPECT_NEAR(norms[1], norms[0], 1e-6 * norms[0]);
  for (size_t i = 0; i < clipped[0].size(); ++i) {
    EXPECT_LT(maxRelativeDifference(clipped[1][i], clipped[0][i]), 1e-5) << "slab " << i;
  }
}

// Only the fused AdamW keeps maxima: SGD and the CPU's slabs say so with
// an undefined tensor, and no step calls them current.
TEST(AbsoluteMaximaTest, WhereTheyCannotBeKeptTheTensorIsUndefined) {
  std::vector<FlatSlab> cpu{{torch::randn({100}), torch::zeros({100}), true}};
  auto adamw = makeAdamW(cpu, {.lr = 1e-2});
  EXPECT_FALSE(adamw->trackAbsoluteMaxima(0, {{0, 50}}).defined()) << "CPU slabs";
  adamw->step();
  EXPECT_FALSE(adamw->absoluteMaximaCurrent());
  auto sgd = makeSGD(cpu, {.lr = 0.1});
  EXPECT_FALSE(sgd->trackAbsoluteMaxima(0, {{0, 50}}).defined()) << "SGD";
}

// The fused step keeps each range's maximum of |param| as it leaves it,
// from the first capturable step on; the eager first step keeps none.
TEST(AbsoluteMaximaTest, TheFusedStepKeepsEachRangesMaximum) {
  DTRAIN_SKIP_WITHOUT_FUSED_ADAMW();
  FusedSwitch on(true);
  std::vector<FlatSlab> slabs = makeSlabs();
  auto opt = makeAdamW(slabs, {.lr = 1e-2, .weight_decay = 0.1});
  const std::vector<std::pair<int64_t, int64_t>> ranges{{0, 1000}, {1001, 500000}, {999000, 1000003}};
  const torch::Tensor maxima = opt->trackAbsoluteMaxima(0, ranges);
  ASSERT_TRUE(maxima.defined());
  EXPECT_EQ(maxima.scalar_type(), torch::kInt);
  EXPECT_EQ(maxima.numel(), 3);
  EXPECT_THROW(opt->trackAbsoluteMaxima(1, {{10, 20}, {15, 30}}), ConfigError) << "overlapping ranges";
  EXPECT_THROW(opt->trackAbsoluteMaxima(7, {{0, 1}}), ConfigError) << "no slab 7";
  setGrads(slabs, 1);
  opt->step();
  EXPECT_FALSE(opt->absoluteMaximaCurrent()) << "the first step runs the torch operations";
  opt->setCapturable(true);
  for (int step = 2; step <= 3; ++step) {
    setGrads(slabs, step);
    opt->step();
    opt->countStep();
    EXPECT_TRUE(opt->absoluteMaximaCurrent());
    for (size_t r = 0; r < ranges.size(); ++r) {
      const float want = slabs[0].param.narrow(0, ranges[r].first, ranges[r].second - ranges[r].first).abs().max().item<float>();
      const float got = maxima[static_cast<int64_t>(r)].view(torch::kFloat).item<float>();
      EXPECT_EQ(got, want) << "step " << step << " range " << r;
    }
  }
}

#if DTRAIN_TORCH_CUDA

// A step captured once and replayed with the lr setLr() wrote before each
// replay, against the same steps run eagerly.
TEST(FusedAdamWTest, AStepCapturedIntoACudaGraphReplaysWithNewLearningRates) {
  DTRAIN_SKIP_WITHOUT_FUSED_ADAMW();
  FusedSwitch on(true);
  const AdamWResult eager = runAdamW(true, 3);
  c10::cuda::CUDAStreamGuard side(c10::cuda::getStreamFromPool());
  std::vector<FlatSlab> slabs = makeSlabs();
  auto opt = makeAdamW(slabs, {.lr = 1e-2, .weight_decay = 0.1});
  opt->setCapturable(true);
  setGrads(slabs, 1);  // the first step eagerly: the graph then replays steps 2 and 3
  opt->step();
  opt->countStep();
  torch::cuda::synchronize();
  at::cuda::CUDAGraph graph;
  compat::beginGraphCapture(graph);
  opt->step();
  graph.capture_end();
  for (int step = 2; step <= 3; ++step) {
    setGrads(slabs, step);
    opt->setLr(1e-2 / step);
    graph.replay();
    opt->countStep();
  }
  torch::cuda::synchronize();
  for (size_t i = 0; i < slabs.size(); ++i) {
    EXPECT_LT(maxRelativeDifference(slabs[i].param.cpu(), eager.params[i]), 1e-6) << "slab " << i;
  }
  EXPECT_EQ(opt->stepCount(), 3);
}

#endif

}  // namespace
}  // namespace dtrain
