// `dtrain plan --calibrate`: short benchmarks on this machine's GPUs --
// `dtrain bench train` of llama-1b on one GPU, and `dtrain bench allreduce`
// at 1 GiB over all of them when there are several -- fitted into the
// constants of plan/calibration.h and written to `path`, which the next
// `dtrain plan --gpu` of the same GPU reads (cli/plan.cc).
#pragma once

#include <string>

namespace dtrain::cli {

// 0, or a ConfigError naming what is missing (no NVIDIA GPU or NVML, a GPU
// not in dtrain's table) or which benchmark failed and its log.
int runPlanCalibrate(const std::string& path);

}  // namespace dtrain::cli
