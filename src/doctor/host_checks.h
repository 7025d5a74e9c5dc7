// Host, RDMA, NCCL-environment and peer checks of `dtrain doctor` (doctor/).
#pragma once

#include <vector>

#include "doctor/check.h"

namespace dtrain::doctor {

// Appends "rdma.*", "nccl.*", "host.*" and the active "peers.*" checks, in
// the order the table prints them.
void addHostChecks(std::vector<CheckSpec>& checks);

}  // namespace dtrain::doctor
