#include "train/nonfinite_tally.h"

#include <torch/torch.h>

#include "common/error.h"
#include "common/log.h"

namespace dtrain {

void NonFiniteTally::add(const std::string& name, const torch::Tensor& values) {
  if (!values.defined() || values.numel() == 0 || !c10::isFloatingType(values.scalar_type())) return;
  const int64_t bad = values.numel() - torch::isfinite(values).sum().item<int64_t>();
  if (bad > 0) counts_[name] += bad;
}

void NonFiniteTally::check(const std::string& checkpoint, bool allowed) const {
  if (counts_.empty()) return;
  const auto& [name, count] = *counts_.begin();
  std::string what = "checkpoint " + checkpoint + ": tensor '" + name + "' has " + std::to_string(count) +
                     " non-finite value(s) (NaN/Inf)";
  if (counts_.size() > 1) what += ", and " + std::to_string(counts_.size() - 1) + " other tensor(s) have some";
  if (allowed) {
    DTRAIN_LOG_WARN(what << "; resuming anyway (" << kAllowNonFiniteFlag << ")");
    return;
  }
  throw ConfigError(what + "; pass " + kAllowNonFiniteFlag + " to resume anyway");
}

}  // namespace dtrain
