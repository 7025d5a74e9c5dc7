// GPU checks of `dtrain doctor` (doctor/): driver and NVML, driver / CUDA /
// NCCL versions, GPU count, persistence mode, memory health, throttling at
// idle, PCIe link, topology and P2P, NVSwitch fabric, foreign processes, and
// the active quick all-reduce across local GPUs.
#pragma once

#include <vector>

#include "doctor/check.h"

namespace dtrain::doctor {

// Appends the GPU checks ("gpu.*") in the order the table prints them.
void addGpuChecks(std::vector<CheckSpec>& checks);

}  // namespace dtrain::doctor
