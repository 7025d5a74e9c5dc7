// The worker of `dtrain bench train` (the command itself is cli/
// bench_train.cc): training throughput of one rank of a data-parallel group
// on a synthetic batch resident on the device (no data loading at all),
// running the step `dtrain train` runs (a TrainingJob's TrainStep: eager or
// a CUDA graph), SGD with momentum, cross-entropy. (private to tools/)
#pragma once

#include "train/train_options.h"

namespace dtrain {

// Runs on every rank of the group (RANK/WORLD_SIZE/... from the launcher).
// Rank 0 writes one JSON object: gpus, samples_per_s, step_ms, loss,
// graphs, flops_per_sample, versions, and with breakdown the time split of
// eager steps. Returns the exit code.
int runThroughputBench(const BenchTrainOptions& options);

}  // namespace dtrain

extern "C" int dtrain_run_bench_train(const dtrain::BenchTrainOptions* options);
