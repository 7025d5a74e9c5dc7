#include "train/fault_drill.h"

#include <signal.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "common/settings.h"
#include "train/train_settings.h"

namespace dtrain {

namespace {

std::vector<std::string> fields(const std::string& spec) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (true) {
    const size_t colon = spec.find(':', begin);
    out.push_back(spec.substr(begin, colon - begin));
    if (colon == std::string::npos) return out;
    begin = colon + 1;
  }
}

int signalNamed(const std::string& name, const std::string& spec) {
  if (name == "USR1" || name == "SIGUSR1") return SIGUSR1;
  if (name == "TERM" || name == "SIGTERM") return SIGTERM;
  if (name == "INT" || name == "SIGINT") return SIGINT;
  throw ConfigError("DTRAIN_FAULT_SIGNAL_AT='" + spec + "': unknown signal '" + name + "'; expected USR1, TERM or INT");
}

}  // namespace

std::unique_ptr<FaultDrill> FaultDrill::fromEnvironment(int rank) {
  const std::string kill = faultKillAtSetting(), signal = faultSignalAtSetting();
  if (kill.empty() && signal.empty()) return nullptr;
  if (envInt("TORCHELASTIC_RESTART_COUNT", 0, 1 << 30).value_or(0) != 0) return nullptr;
  if (!kill.empty()) {
    const std::vector<std::string> f = fields(kill);
    if (f.size() != 2) throw ConfigError("DTRAIN_FAULT_KILL_AT='" + kill + "' is not RANK:STEP");
    if (parseInt64(f[0], "DTRAIN_FAULT_KILL_AT rank") != rank) return nullptr;
    return std::make_unique<FaultDrill>(rank, parseInt64(f[1], "DTRAIN_FAULT_KILL_AT step"));
  }
  const std::vector<std::string> f = fields(signal);
  if (f.size() < 3 || f.size() > 4 || (f.size() == 4 && f[3] != "parent")) {
    throw ConfigError("DTRAIN_FAULT_SIGNAL_AT='" + signal + "' is not RANK:STEP:SIGNAL[:parent]");
  }
  if (parseInt64(f[0], "DTRAIN_FAULT_SIGNAL_AT rank") != rank) return nullptr;
  return std::make_unique<FaultDrill>(rank, parseInt64(f[1], "DTRAIN_FAULT_SIGNAL_AT step"),
                                      signalNamed(f[2], signal), f.size() == 4);
}

void FaultDrill::stepFinished(int64_t step, bool /*graphed*/) {
  if (step + 1 != after_) return;
  if (signal_ == 0) {
    DTRAIN_LOG_WARN("DTRAIN_FAULT_KILL_AT: rank " << rank_ << " kills itself after step " << after_);
    ::kill(::getpid(), SIGKILL);
    return;
  }
  DTRAIN_LOG_WARN("DTRAIN_FAULT_SIGNAL_AT: rank " << rank_ << " sends signal " << signal_ << " to "
                  << (to_parent_ ? "its parent" : "itself") << " after step " << after_);
  ::kill(to_parent_ ? ::getppid() : ::getpid(), signal_);
}

}  // namespace dtrain
