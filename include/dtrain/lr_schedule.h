// Learning-rate schedules as pure functions of the (0-based) optimizer step,
// so a resumed job recomputes its rate from the step alone.
//
//   optimizer->setLr(dtrain::learningRateAt(schedule, step));
//
// Every kind starts with an optional linear warmup:
//   step < warmup_steps:  lr = base_lr * (step + 1) / warmup_steps
// and then, with s = step - warmup_steps:
//   "constant":  base_lr
//   "cosine":    min_lr + (base_lr - min_lr) * (1 + cos(pi * s / (total_steps - warmup_steps))) / 2,
//                base_lr at warmup_steps, min_lr at total_steps and after
//   "step":      base_lr * gamma ^ floor(s / step_size)
#pragma once

#include <cstdint>
#include <string>

namespace dtrain {

struct LrScheduleOptions {
  std::string kind = "cosine";  // "constant" | "cosine" | "step"
  double base_lr = 0.1;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // cosine only
  double min_lr = 0;        // cosine only
  int64_t step_size = 0;    // step only
  double gamma = 0.1;       // step only
};

// The rate for 0-based `step`. Validates options; ConfigError also for step < 0.
double learningRateAt(const LrScheduleOptions& options, int64_t step);

// ConfigError for an unknown kind (listing the valid ones), a negative
// base_lr, warmup_steps, total_steps, min_lr, step_size or gamma, cosine
// without total_steps > warmup_steps, or step without step_size > 0.
void validate(const LrScheduleOptions& options);

}  // namespace dtrain
