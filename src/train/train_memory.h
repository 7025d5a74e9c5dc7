// The memory estimate's inputs (plan/memory_estimate.h) from a training
// job's flags, torch-free: `dtrain train` refuses a job that cannot fit
// with them, and `dtrain plan` sizes the layouts it proposes with the same.
#pragma once

#include "models/lm_config.h"
#include "plan/memory_estimate.h"
#include "train/train_options.h"

namespace dtrain {

// A language model's job over `ranks` processes (data x tensor x pipeline);
// `cuda`: on GPUs (the fused head, the context's margin). `config` must
// outlive the result (it points to it).
MemoryInputs lmMemoryInputs(const TrainOptions& o, const models::LanguageModelConfig& config, int ranks, bool cuda);

}  // namespace dtrain
