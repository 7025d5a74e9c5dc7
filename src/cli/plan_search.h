// `dtrain plan`'s search (cli/plan.cc prints it): the layouts of a
// language model's training run on a cluster -- tensor, pipeline and
// data-parallel sizes, the --shard stage, micro-batch, activation
// checkpointing -- each written as the `dtrain train` flags that run it,
// parsed and checked by dtrain train's own options and parallel plan (a
// layout dtrain would refuse is never proposed), sized by the memory
// estimate `dtrain train` refuses with, and timed by plan/step_model.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/lm_config.h"
#include "plan/step_model.h"

namespace dtrain::cli {

struct PlanModel {
  std::string name;  // a language model's name (gpt2-124m, llama-8b, ...)
  int64_t layers = 0, dim = 0, heads = 0, kv_heads = 0, ffn_dim = 0, vocab_size = 0;  // 0: the model's
  int64_t seq_len = 2048;
};

struct PlannedLayout {
  plan::Layout layout;
  std::vector<std::string> train_flags;  // what follows `dtrain train`
  int64_t memory_bytes = 0;              // the estimate of the allocator's peak per GPU (the fullest)
  int64_t needed_bytes = 0;              // with checkFits' margin: what must fit the GPU's memory
  plan::StepTime time;
};

struct PlanSearch {
  std::vector<PlannedLayout> fitting;
  int tried = 0;
  int refused = 0;       // by dtrain train's own checks
  int too_big = 0;       // by the memory estimate
  int64_t smallest_need = 0;  // bytes per GPU of the leanest layout tried, with the margin
};

// The model's shape as `dtrain train` would build it (ConfigError naming a
// bad flag).
models::LanguageModelConfig planModelConfig(const PlanModel& model);

PlanSearch searchLayouts(const PlanModel& model, const plan::Cluster& cluster, int64_t tokens_per_step, bool fp8,
                         bool fp8_rowwise = false);

// The products' efficiency that a measured `tokens_per_s` of `model` at
// `batch` sequences on one GPU (no sharding) gives this build's step model
// (its memory term taken out): `plan --calibrate`'s fit, and a calibration
// file's measurement read again.
double calibrationEfficiency(const PlanModel& model, const plan::GpuSpec& gpu, int64_t batch, double tokens_per_s);

}  // namespace dtrain::cli
