// Helpers of the fused-operation tests: skipping without a GPU or a fused
// build, switching DTRAIN_FUSED_KERNELS for a scope, running an operation
// forward + backward, and comparing tensors within a relative tolerance.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::models::testing {

// Empty when the fused path can run here, else why not.
std::string fusedUnavailableReason();

#define DTRAIN_SKIP_WITHOUT_FUSED_KERNELS()                                                  \
  do {                                                                                       \
    const std::string dtrain_why_ = ::dtrain::models::testing::fusedUnavailableReason();     \
    if (!dtrain_why_.empty()) GTEST_SKIP() << "fused CUDA operations not testable: " << dtrain_why_; \
  } while (0)

// DTRAIN_FUSED_KERNELS and DTRAIN_FUSED_BATCH_NORM set to 1 or 0 for the
// scope (restored after), the cached settings forgotten both times.
class FusedKernelsSwitch {
 public:
  explicit FusedKernelsSwitch(bool on);
  ~FusedKernelsSwitch();
  FusedKernelsSwitch(const FusedKernelsSwitch&) = delete;
  FusedKernelsSwitch& operator=(const FusedKernelsSwitch&) = delete;

 private:
  std::optional<std::string> previous_;
  std::optional<std::string> previous_batch_norm_;
};

// CUDA autocast to bf16 for the scope (cast cache cleared at the end).
class Bf16Autocast {
 public:
  Bf16Autocast();
  ~Bf16Autocast();
  Bf16Autocast(const Bf16Autocast&) = delete;
  Bf16Autocast& operator=(const Bf16Autocast&) = delete;

 private:
  bool previous_enabled_;
  at::ScalarType previous_dtype_;
};

// An operation over leaf tensors, returning the outputs to compare.
using Operation = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

struct OperationRun {
  std::vector<torch::Tensor> outputs;  // as returned (their dtypes are compared)
  std::vector<torch::Tensor> grads;    // of each floating-point input (undefined: none reached it)
  bool reached_fused = false;          // an output's graph holds a fused autograd function
};

// Copies of `inputs` as leaves (floating ones requiring grad), op on them,
// then backward of sum_i <outputs[i], probes[i]> (fp32 probes, made from a
// fixed seed when `probes` is empty, so that both runs use the same).
OperationRun runOperation(const Operation& op, const std::vector<torch::Tensor>& inputs, bool fused,
                          std::vector<torch::Tensor>& probes, bool autocast = false);

// Whether t's autograd graph, within a few nodes of its grad_fn, holds one
// of the fused autograd functions.
bool reachesFused(const torch::Tensor& t);

// Every element within rtol * (|ref| + rms(ref)), NaN never passing; the
// message names the worst element.
::testing::AssertionResult allClose(const torch::Tensor& got, const torch::Tensor& ref, double rtol);

// The operation fused and unfused on the same inputs: same output dtypes,
// outputs within `forward_rtol`, gradients within `backward_rtol`, and the
// fused run really fused (unless `expect_fused` is false).
void expectSameAsLibtorch(const Operation& op, const std::vector<torch::Tensor>& inputs, double forward_rtol,
                          double backward_rtol, bool autocast = false, bool expect_fused = true);

}  // namespace dtrain::models::testing
