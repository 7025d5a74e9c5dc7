// The training job behind `dtrain train`, assembled from narrow parts: the
// task (what is learned: data, model, evaluation), the TrainingJob (how: the
// group, DataParallel, optimizer, step), the JobCheckpoint, the observers
// (progress, metrics, trace, restart drill) and the TrainingLoop. Library
// users with their own loop use DataParallel and friends directly
// (examples/). The top of train/: nothing else in train/ includes it.
#pragma once

#include "train/train_options.h"

namespace dtrain {

// Runs the job on this rank; returns the process exit code (0 on success).
// Bad options throw ConfigError naming the option and what was expected.
int runTraining(const TrainOptions& options);

}  // namespace dtrain

// The same, with C linkage: the dtrain binary loads the runtime with dlopen
// when `dtrain train` runs and calls this.
extern "C" int dtrain_run_training(const dtrain::TrainOptions* options);
