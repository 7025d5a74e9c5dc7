#include "dtrain/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

#include "common/error.h"

namespace dtrain {
namespace {

template <typename T>
void requireNonNegative(const char* field, T value) {
  if (!(value >= 0)) {
    std::ostringstream message;
    message << "lr schedule: " << field << " is " << value << ", expected >= 0";
    throw ConfigError(message.str());
  }
}

}  // namespace

void validate(const LrScheduleOptions& options) {
  const std::string& kind = options.kind;
  if (kind != "constant" && kind != "cosine" && kind != "step") {
    throw ConfigError("lr schedule: unknown kind '" + kind + "' (expected constant, cosine or step)");
  }
  requireNonNegative("base_lr", options.base_lr);
  requireNonNegative("warmup_steps", options.warmup_steps);
  requireNonNegative("total_steps", options.total_steps);
  requireNonNegative("min_lr", options.min_lr);
  requireNonNegative("step_size", options.step_size);
  requireNonNegative("gamma", options.gamma);
  if (kind == "cosine" && options.total_steps <= options.warmup_steps) {
    throw ConfigError("lr schedule: cosine needs total_steps > warmup_steps (got total_steps " +
                      std::to_string(options.total_steps) + ", warmup_steps " +
                      std::to_string(options.warmup_steps) + ")");
  }
  if (kind == "step" && options.step_size <= 0) {
    throw ConfigError("lr schedule: step needs step_size > 0 (got " + std::to_string(options.step_size) + ")");
  }
}

double learningRateAt(const LrScheduleOptions& options, int64_t step) {
  validate(options);
  if (step < 0) throw ConfigError("lr schedule: step is " + std::to_string(step) + ", expected >= 0");
  if (step < options.warmup_steps) {
    return options.base_lr * static_cast<double>(step + 1) / static_cast<double>(options.warmup_steps);
  }
  const int64_t since_warmup = step - options.warmup_steps;
  if (options.kind == "cosine") {
    const double decay_steps = static_cast<double>(options.total_steps - options.warmup_steps);
    const double progress = std::min(1.0, static_cast<double>(since_warmup) / decay_steps);
    return options.min_lr +
           (options.base_lr - options.min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
  }
  if (options.kind == "step") {
    return options.base_lr * std::pow(options.gamma, static_cast<double>(since_warmup / options.step_size));
  }
  return options.base_lr;
}

}  // namespace dtrain
