#include "doctor/host_checks.h"

namespace dtrain::doctor {

void addHostChecks(std::vector<CheckSpec>& checks) {}

}  // namespace dtrain::doctor
