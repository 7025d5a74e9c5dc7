// How the GPUs are connected (doctor/): the GPU-to-GPU matrix of
// `nvidia-smi topo -m` with P2P access and inactive NVLinks, and the
// registration of the GPUs with an NVSwitch fabric.
#pragma once

#include "doctor/check.h"

namespace dtrain::doctor {

CheckResult checkTopology(const DoctorContext& ctx);  // gpu.topology
CheckResult checkFabric(const DoctorContext& ctx);    // gpu.fabric

}  // namespace dtrain::doctor
