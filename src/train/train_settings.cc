#include "train/train_settings.h"

#include "common/settings.h"

namespace dtrain {
namespace {

std::string checkBackend(const std::string& text) {
  return text == "auto" || text == "nccl" || text == "gloo" ? "" : "one of auto, nccl or gloo";
}

DTRAIN_SETTING_CHECKED(std::string, kBackend, "backend", "DTRAIN_BACKEND", "auto",
                       "Collective backend of training workers: auto (nccl when a GPU is visible, else gloo), "
                       "nccl or gloo.",
                       checkBackend);
DTRAIN_SETTING(std::string, kFaultKillAt, "fault-kill-at", "DTRAIN_FAULT_KILL_AT", "",
               "Testing aid for restart drills: RANK:STEP makes that rank of `dtrain train` SIGKILL itself after "
               "STEP steps, in the first attempt only (TORCHELASTIC_RESTART_COUNT=0).");

DTRAIN_SETTING(std::string, kFaultKillInCheckpoint, "fault-kill-in-checkpoint", "DTRAIN_FAULT_KILL_IN_CHECKPOINT", "",
               "Testing aid for checkpoint drills: RANK:STEP makes that rank of `dtrain train` SIGKILL itself halfway "
               "through writing its shard of the checkpoint of step STEP, in the first attempt only.");

DTRAIN_SETTING(std::string, kFaultSignalAt, "fault-signal-at", "DTRAIN_FAULT_SIGNAL_AT", "",
               "Testing aid for stop drills: RANK:STEP:SIGNAL[:parent] makes that rank of `dtrain train` send "
               "SIGNAL (USR1, TERM or INT) to itself, or to its parent (the launcher), after STEP steps, in the "
               "first attempt only.");

DTRAIN_SETTING(bool, kProgressTerminal, "progress-terminal", "DTRAIN_PROGRESS_TERMINAL", false,
               "Set to 1 by dtrain launch for a worker whose stderr reaches the launcher's terminal through its log "
               "router: --progress auto then draws the bar there.");

std::string checkNonNegative(const int64_t& bytes) { return bytes >= 0 ? "" : "a number of bytes >= 0"; }

DTRAIN_SETTING_CHECKED(int64_t, kDeviceMemory, "device-memory", "DTRAIN_DEVICE_MEMORY_BYTES", 0,
                       "Bytes of memory a training job may plan to use per device before it starts (0: the GPU's "
                       "free memory; on the CPU, the host's available memory, within its cgroup's limit, shared "
                       "by the host's ranks): leaves room for other processes, and lets the refusal of a job that "
                       "cannot fit be tried anywhere.",
                       checkNonNegative);

}  // namespace

int64_t deviceMemorySetting() { return kDeviceMemory.get(); }
bool progressTerminalSetting() { return kProgressTerminal.get(); }
std::string backendSetting() { return kBackend.get(); }
std::string faultKillAtSetting() { return kFaultKillAt.get(); }
std::string faultKillInCheckpointSetting() { return kFaultKillInCheckpoint.get(); }
std::string faultSignalAtSetting() { return kFaultSignalAt.get(); }

}  // namespace dtrain
