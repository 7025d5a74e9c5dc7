// Per-GPU health checks of `dtrain doctor` (doctor/), each from NVML
// readings of every GPU: memory health, throttling at idle, the PCIe link,
// processes already on the GPUs.
#pragma once

#include "doctor/check.h"

namespace dtrain::doctor {

CheckResult checkMemoryHealth(const DoctorContext& ctx);  // gpu.memory_health
CheckResult checkClocks(const DoctorContext& ctx);        // gpu.clocks
CheckResult checkPcie(const DoctorContext& ctx);          // gpu.pcie
CheckResult checkProcesses(const DoctorContext& ctx);     // gpu.processes

}  // namespace dtrain::doctor
