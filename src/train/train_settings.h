// The training runtime's settings (DTRAIN_SETTING), in a small torch-free
// library so that `dtrain settings` lists them without loading libtorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dtrain {

// DTRAIN_DEVICE_MEMORY_BYTES: the bytes per device a job may plan for (0:
// the GPU's free memory).
int64_t deviceMemorySetting();

// DTRAIN_PROGRESS_TERMINAL: dtrain launch routes this worker's stderr to a
// terminal.
bool progressTerminalSetting();

// DTRAIN_BACKEND: auto | nccl | gloo.
std::string backendSetting();
// DTRAIN_FAULT_KILL_AT: "" or RANK:STEP (restart drills).
std::string faultKillAtSetting();
std::string faultSignalAtSetting();
// DTRAIN_FAULT_SLOW_RANK: RANK:FRACTION (straggler drills): rank RANK's
// steps take FRACTION longer (0 < FRACTION <= 10).
struct SlowRankDrill {
  int rank = 0;
  double fraction = 0;
};
// nullopt when unset; ConfigError naming the variable when malformed.
std::optional<SlowRankDrill> faultSlowRankSetting();
// The drill `spec` asks for; ConfigError naming DTRAIN_FAULT_SLOW_RANK,
// the value and the form expected.
SlowRankDrill parseSlowRankDrill(const std::string& spec);
// DTRAIN_FAULT_KILL_IN_CHECKPOINT: "" or RANK:STEP (checkpoint-write drills).
std::string faultKillInCheckpointSetting();

}  // namespace dtrain
