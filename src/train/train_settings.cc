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

}  // namespace

std::string backendSetting() { return kBackend.get(); }
std::string faultKillAtSetting() { return kFaultKillAt.get(); }
std::string faultKillInCheckpointSetting() { return kFaultKillInCheckpoint.get(); }

}  // namespace dtrain
