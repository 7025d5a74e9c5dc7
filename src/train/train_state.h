// What a `dtrain train` checkpoint holds and how a job resumes from one
// (private to train/).
//
// Tensors: "model.slab.<i>" (the flat parameter slabs), "model.buffer.<name>"
// (BatchNorm statistics, rank 0's), the optimizer's and the scaler's state,
// "rng.cpu" (the default CPU generator). Meta: step, epoch, batch (the next
// batch of that epoch), world_size, batch_size, model, dataset, seed.
//
// Rank 0 reads the checkpoint and broadcasts it, so only rank 0 needs the
// checkpoint directory. A checkpoint from a job with another world size or
// per-rank batch size resumes at the start of the next epoch (the order of
// samples inside an epoch depends on both), with a warning.
#pragma once

#include <cstdint>

#include "dtrain/amp.h"
#include "dtrain/checkpoint.h"
#include "dtrain/data_parallel.h"
#include "dtrain/init.h"
#include "dtrain/optim.h"
#include "train/trainer.h"

namespace dtrain {

struct TrainState {
  DataParallel& dp;
  Optimizer& optimizer;
  GradScaler& scaler;
  Context& ctx;
};

struct TrainPosition {
  int64_t epoch = 0;
  int64_t batch = 0;  // next batch within epoch
  int64_t step = 0;   // optimizer steps done
};

// The position after `batch` batches of `epoch` (rolls over to the next epoch).
TrainPosition nextPosition(int64_t epoch, int64_t batch, int64_t step, int64_t steps_per_epoch);

CheckpointState packState(const TrainState& state, const TrainPosition& position, const TrainConfig& config);

// Resolves config.resume on rank 0, restores every rank from it and returns
// where to go on from (step 0 when "auto" finds nothing).
TrainPosition resumeFrom(const TrainConfig& config, TrainState& state, int64_t steps_per_epoch);

}  // namespace dtrain
