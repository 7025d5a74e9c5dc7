// Resuming from a checkpoint of the single-file layout dtrain wrote before
// sharded checkpoints: the model per parameter, the optimizer state per
// slab in the unsharded layout (the keys of Optimizer::stateDict()). Rank 0
// reads it whole and every rank gets it by broadcast, as it did then; a
// sharded optimizer keeps its slices. (private to train/)
#pragma once

#include <string>

#include "dtrain/checkpoint.h"
#include "train/training_job.h"

namespace dtrain {

// True for a file of that layout (its meta has no "tensor_layout").
bool isSlabLayoutCheckpoint(const nlohmann::json& meta);

// Every rank: restores the job from `state` (rank 0's, loaded from `path`;
// nullptr on the others). ConfigError on every rank for a tensor this job
// lacks or has at another shape (a different model, optimizer or
// precision), NaN or Inf in any tensor (unless `allow_nonfinite`: a
// warning) or an RNG state libtorch refuses.
void restoreSlabLayoutCheckpoint(TrainingJob& job, const std::string& path, const CheckpointState* state,
                                 bool allow_nonfinite);

}  // namespace dtrain
