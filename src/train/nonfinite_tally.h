// Non-finite values in what a resume reads, counted per tensor and
// reported once (private to train/).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <torch/types.h>

namespace dtrain {

// The flag of `dtrain train` (CheckpointOptions::allow_nonfinite).
inline constexpr const char* kAllowNonFiniteFlag = "--allow-nonfinite-checkpoint";

// Non-finite values (NaN, +-Inf) in what a restore reads, per tensor.
class NonFiniteTally {
 public:
  // Counts those in `values` (on the CPU; other dtypes than floating point
  // hold none) under `name`, adding to what that name had.
  void add(const std::string& name, const torch::Tensor& values);
  bool empty() const { return counts_.empty(); }
  // ConfigError naming `checkpoint`, the first tensor by name that has some
  // and how many, the number of others, and the flag that allows them;
  // with `allowed`, the same as a warning instead. Nothing when every value
  // was finite.
  void check(const std::string& checkpoint, bool allowed) const;

 private:
  std::map<std::string, int64_t> counts_;
};

}  // namespace dtrain
