// The optimizer and schedule a run gets for what its flags left out, by
// model kind (train_options.h): the GPT recipe for language models, SGD for
// image models; and the start line's words for them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <utility>

#include "models/lm_counts.h"
#include "train/train_options.h"

namespace dtrain {

double languageModelLr(int64_t parameters) {
  // GPT-3's models: parameters, peak learning rate.
  static constexpr std::pair<double, double> kGpt3[] = {{125e6, 6.0e-4}, {350e6, 3.0e-4},  {760e6, 2.5e-4},
                                                        {1.3e9, 2.0e-4}, {2.7e9, 1.6e-4},  {6.7e9, 1.2e-4},
                                                        {13e9, 1.0e-4},  {175e9, 0.6e-4}};
  const double n = static_cast<double>(std::max<int64_t>(parameters, 1));
  if (n <= kGpt3[0].first) return std::min(3e-3, kGpt3[0].second * std::pow(kGpt3[0].first / n, 0.25));
  for (size_t i = 1; i < std::size(kGpt3); ++i) {
    if (n > kGpt3[i].first) continue;
    const auto [n0, lr0] = kGpt3[i - 1];
    const auto [n1, lr1] = kGpt3[i];
    const double t = std::log(n / n0) / std::log(n1 / n0);
    return std::exp(std::log(lr0) + t * (std::log(lr1) - std::log(lr0)));
  }
  return kGpt3[std::size(kGpt3) - 1].second;
}

OptimizerOptions withImageDefaults(OptimizerOptions opt) {
  if (opt.kind == OptimizerKind::kAuto) opt.kind = OptimizerKind::kSgd;
  if (opt.lr < 0) opt.lr = 0.05;
  if (opt.weight_decay < 0) opt.weight_decay = 5e-4;
  if (opt.beta2 < 0) opt.beta2 = 0.999;
  return opt;
}

ScheduleOptions withImageDefaults(ScheduleOptions schedule) {
  if (schedule.warmup_epochs < 0) schedule.warmup_epochs = 0.2;
  if (schedule.min_lr < 0) schedule.min_lr = 0;
  return schedule;
}

TrainOptions withModelDefaults(TrainOptions o) {
  OptimizerOptions& opt = o.optimizer;
  ScheduleOptions& schedule = o.schedule;
  if (!isLanguageModel(o.model)) {
    opt = withImageDefaults(opt);
    schedule = withImageDefaults(schedule);
    return o;
  }
  if (opt.kind == OptimizerKind::kAuto) opt.kind = OptimizerKind::kAdamW;
  if (opt.lr < 0) opt.lr = languageModelLr(models::parameterCount(languageModelConfig(o.model)));
  if (opt.weight_decay < 0) opt.weight_decay = 0.1;
  if (opt.beta2 < 0) opt.beta2 = 0.95;
  if (schedule.warmup_epochs < 0 && schedule.warmup_steps < 0) {
    schedule.warmup_epochs = 0;
    schedule.warmup_share = 0.05;
    schedule.warmup_cap = 2000;
  }
  if (schedule.warmup_epochs < 0) schedule.warmup_epochs = 0;
  if (schedule.min_lr < 0) schedule.min_lr = std::min(opt.lr, 100.0) / 10;
  return o;
}

std::string describeOptimizer(const TrainOptions& o) {
  // Three significant digits: "0.0003", not 0.003 / 10's last bits.
  const auto formatNumber = [](double value) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.3g", value);
    return std::string(text);
  };
  const OptimizerOptions& opt = o.optimizer;
  const ScheduleOptions& schedule = o.schedule;
  std::string text = std::string(optimizerName(opt.kind)) + " lr " + formatNumber(opt.lr) + " (";
  if (opt.kind == OptimizerKind::kAdamW) {
    text += "betas " + formatNumber(opt.beta1) + "/" + formatNumber(opt.beta2) + ", ";
  } else if (opt.momentum > 0) {
    text += std::string(opt.nesterov ? "nesterov " : "") + "momentum " + formatNumber(opt.momentum) + ", ";
  }
  text += "weight decay " + formatNumber(opt.weight_decay) + ", warm-up ";
  if (schedule.warmup_steps >= 0) {
    text += std::to_string(schedule.warmup_steps) + " steps";
  } else if (schedule.warmup_share > 0) {
    text += formatNumber(schedule.warmup_share * 100) + "% of the steps (at most " +
            std::to_string(schedule.warmup_cap) + ")";
  } else {
    text += formatNumber(schedule.warmup_epochs) + " epochs";
  }
  text += ", " + std::string(scheduleName(schedule.kind));
  if (schedule.kind == ScheduleKind::kCosine) text += " to " + formatNumber(schedule.min_lr);
  return text + ")";
}

}  // namespace dtrain
