// The memory estimate's inputs (plan/memory_estimate.h) from a training
// job's flags, torch-free: `dtrain train` refuses a job that cannot fit
// with them, `dtrain plan` sizes the layouts it proposes with the same, and
// `dtrain bench train` prints the same estimate beside its measured peak.
#pragma once

#include "models/lm_config.h"
#include "plan/memory_estimate.h"
#include "train/train_options.h"

namespace dtrain {

// A language model's job over `ranks` processes (data x tensor x pipeline)
// of `batch_size` sequences per rank; `cuda`: on GPUs (the fused head, the
// context's margin). `config` must outlive the result (it points to it).
// `dtrain bench train` sizes its job with this one too.
MemoryInputs lmMemoryInputs(const ModelSpec& model, const ParallelOptions& parallel, const ExecutionOptions& execution,
                            const OptimizerOptions& optimizer, int64_t batch_size,
                            const models::LanguageModelConfig& config, int ranks, bool cuda);
// The same from a training job's options.
MemoryInputs lmMemoryInputs(const TrainOptions& o, const models::LanguageModelConfig& config, int ranks, bool cuda);

}  // namespace dtrain
