#include "fused_test_util.h"

#include <ATen/autocast_mode.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <sstream>
#include <utility>

#include "common/settings.h"
#include "libtorch/compat.h"
#include "models/fused_ops_cuda.h"

namespace dtrain::models::testing {
namespace {

constexpr const char* kSwitchEnv = "DTRAIN_FUSED_KERNELS";
// The ResNets' fused batch norm has a switch of its own (off by default);
// the tests turn both on or off together.
constexpr const char* kBatchNormEnv = "DTRAIN_FUSED_BATCH_NORM";

void forgetSetting() {
  for (const SettingBase* setting : allSettings()) {
    if (setting->env() == kSwitchEnv || setting->env() == kBatchNormEnv) setting->reset();
  }
}

}  // namespace

std::string fusedUnavailableReason() {
  if (!fused::compiledIn()) return "this build has no fused kernels (a CPU libtorch, or no CUDA compiler)";
  if (!torch::cuda::is_available()) return "no CUDA device";
  return "";
}

FusedKernelsSwitch::FusedKernelsSwitch(bool on) {
  if (const char* v = std::getenv(kSwitchEnv)) previous_ = v;
  if (const char* v = std::getenv(kBatchNormEnv)) previous_batch_norm_ = v;
  setenv(kSwitchEnv, on ? "1" : "0", 1);
  setenv(kBatchNormEnv, on ? "1" : "0", 1);
  forgetSetting();
}

FusedKernelsSwitch::~FusedKernelsSwitch() {
  for (const auto& [env, previous] : {std::pair{kSwitchEnv, previous_}, {kBatchNormEnv, previous_batch_norm_}}) {
    if (previous) {
      setenv(env, previous->c_str(), 1);
    } else {
      unsetenv(env);
    }
  }
  forgetSetting();
}

Bf16Autocast::Bf16Autocast()
    : previous_enabled_(compat::isAutocastEnabled(c10::DeviceType::CUDA)),
      previous_dtype_(compat::autocastDtype(c10::DeviceType::CUDA)) {
  compat::setAutocastEnabled(c10::DeviceType::CUDA, true);
  compat::setAutocastDtype(c10::DeviceType::CUDA, at::kBFloat16);
}

Bf16Autocast::~Bf16Autocast() {
  compat::setAutocastEnabled(c10::DeviceType::CUDA, previous_enabled_);
  compat::setAutocastDtype(c10::DeviceType::CUDA, previous_dtype_);
  at::autocast::clear_cache();
}

bool reachesFused(const torch::Tensor& t) {
  if (!t.grad_fn()) return false;
  std::deque<std::pair<torch::autograd::Node*, int>> todo{{t.grad_fn().get(), 0}};
  while (!todo.empty()) {
    auto [node, depth] = todo.front();
    todo.pop_front();
    if (node->name().find("Fused") != std::string::npos) return true;
    if (depth == 4) continue;
    for (const auto& edge : node->next_edges()) {
      if (edge.function) todo.emplace_back(edge.function.get(), depth + 1);
    }
  }
  return false;
}

OperationRun runOperation(const Operation& op, const std::vector<torch::Tensor>& inputs, bool fused,
                          std::vector<torch::Tensor>& probes, bool autocast) {
  FusedKernelsSwitch on(fused);
  std::vector<torch::Tensor> leaves;
  for (const torch::Tensor& t : inputs) {
    torch::Tensor leaf = t.detach().clone();
    if (leaf.is_floating_point()) leaf.requires_grad_(true);
    leaves.push_back(leaf);
  }
  OperationRun run;
  {
    std::optional<Bf16Autocast> scope;
    if (autocast) scope.emplace();
    run.outputs = op(leaves);
  }
  if (probes.empty()) {
    torch::manual_seed(1234);
    for (const torch::Tensor& out : run.outputs) {
      probes.push_back(torch::randn(out.sizes(), out.options().dtype(torch::kFloat)));
    }
  }
  torch::Tensor objective = torch::zeros({}, run.outputs.front().options().dtype(torch::kFloat));
  for (size_t i = 0; i < run.outputs.size(); ++i) {
    objective = objective + (run.outputs[i].to(torch::kFloat) * probes[i]).sum();
    run.reached_fused = run.reached_fused || reachesFused(run.outputs[i]);
  }
  objective.backward();
  for (const torch::Tensor& leaf : leaves) run.grads.push_back(leaf.requires_grad() ? leaf.grad() : torch::Tensor());
  return run;
}

::testing::AssertionResult allClose(const torch::Tensor& got, const torch::Tensor& ref, double rtol) {
  if (got.sizes() != ref.sizes()) {
    return ::testing::AssertionFailure() << "sizes " << got.sizes() << " != " << ref.sizes();
  }
  const torch::Tensor g = got.detach().to(torch::kCPU, torch::kDouble), r = ref.detach().to(torch::kCPU, torch::kDouble);
  const double scale = r.numel() ? r.square().mean().sqrt().item<double>() : 0.0;
  const torch::Tensor allowed = rtol * (r.abs() + scale);
  const torch::Tensor err = (g - r).abs();
  const torch::Tensor bad = (err <= allowed).logical_not();  // NaN is bad
  const int64_t failures = bad.sum().item<int64_t>();
  const torch::Tensor rel = (err / (r.abs() + scale + 1e-300)).nan_to_num(1e300);
  const int64_t worst = rel.numel() ? rel.argmax().item<int64_t>() : 0;
  std::ostringstream msg;
  if (rel.numel()) {
    msg << "worst relative error " << rel.flatten()[worst].item<double>() << " at flat index " << worst << " (got "
        << g.flatten()[worst].item<double>() << ", ref " << r.flatten()[worst].item<double>() << "), rtol " << rtol;
  }
  if (failures == 0) return ::testing::AssertionSuccess() << msg.str();
  return ::testing::AssertionFailure() << failures << " of " << got.numel() << " elements out of tolerance; "
                                       << msg.str();
}

// A bf16 result both paths compute in fp32 and round once may still differ
// by one bf16 step (2^-8 relative) where the fp32 values straddle a
// rounding boundary.
static double atLeastOneUlp(const torch::Tensor& t, double rtol) {
  return t.scalar_type() == torch::kBFloat16 ? std::max(rtol, 1.0 / 256) : rtol;
}

void expectSameAsLibtorch(const Operation& op, const std::vector<torch::Tensor>& inputs, double forward_rtol,
                          double backward_rtol, bool autocast, bool expect_fused) {
  std::vector<torch::Tensor> probes;
  const OperationRun ref = runOperation(op, inputs, /*fused=*/false, probes, autocast);
  const OperationRun got = runOperation(op, inputs, /*fused=*/true, probes, autocast);
  EXPECT_FALSE(ref.reached_fused) << "DTRAIN_FUSED_KERNELS=0 still took a fused function";
  if (expect_fused) {
    EXPECT_TRUE(got.reached_fused) << "the fused path declined these inputs";
  }
  ASSERT_EQ(got.outputs.size(), ref.outputs.size());
  for (size_t i = 0; i < ref.outputs.size(); ++i) {
    EXPECT_EQ(got.outputs[i].scalar_type(), ref.outputs[i].scalar_type()) << "output " << i;
    EXPECT_TRUE(allClose(got.outputs[i], ref.outputs[i], atLeastOneUlp(got.outputs[i], forward_rtol)))
        << "output " << i;
  }
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    ASSERT_EQ(got.grads[i].defined(), ref.grads[i].defined()) << "gradient of input " << i;
    if (!ref.grads[i].defined()) continue;
    EXPECT_EQ(got.grads[i].scalar_type(), ref.grads[i].scalar_type()) << "gradient of input " << i;
    EXPECT_TRUE(allClose(got.grads[i], ref.grads[i], atLeastOneUlp(got.grads[i], backward_rtol)))
        << "gradient of input " << i;
  }
}

}  // namespace dtrain::models::testing
