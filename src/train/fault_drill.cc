#include "train/fault_drill.h"

#include <signal.h>
#include <unistd.h>

#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "common/settings.h"
#include "train/train_settings.h"

namespace dtrain {

std::unique_ptr<FaultDrill> FaultDrill::fromEnvironment(int rank) {
  const std::string spec = faultKillAtSetting();
  if (spec.empty()) return nullptr;
  const auto colon = spec.find(':');
  if (colon == std::string::npos) throw ConfigError("DTRAIN_FAULT_KILL_AT='" + spec + "' is not RANK:STEP");
  const int64_t target_rank = parseInt64(spec.substr(0, colon), "DTRAIN_FAULT_KILL_AT rank");
  const int64_t step = parseInt64(spec.substr(colon + 1), "DTRAIN_FAULT_KILL_AT step");
  if (envInt("TORCHELASTIC_RESTART_COUNT", 0, 1 << 30).value_or(0) != 0) return nullptr;
  if (target_rank != rank) return nullptr;
  return std::make_unique<FaultDrill>(rank, step);
}

void FaultDrill::stepFinished(int64_t step, bool /*graphed*/) {
  if (step + 1 != kill_after_) return;
  DTRAIN_LOG_WARN("DTRAIN_FAULT_KILL_AT: rank " << rank_ << " kills itself after step " << kill_after_);
  ::kill(::getpid(), SIGKILL);
}

}  // namespace dtrain
