// The training runtime's settings (DTRAIN_SETTING), in a small torch-free
// library so that `dtrain settings` lists them without loading libtorch.
#pragma once

#include <cstdint>
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
// DTRAIN_FAULT_KILL_IN_CHECKPOINT: "" or RANK:STEP (checkpoint-write drills).
std::string faultKillInCheckpointSetting();

}  // namespace dtrain
