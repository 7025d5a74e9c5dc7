#include "doctor/gpu_checks.h"

namespace dtrain::doctor {

void addGpuChecks(std::vector<CheckSpec>& checks) {}

}  // namespace dtrain::doctor
