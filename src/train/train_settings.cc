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

std::string checkSlowRank(const std::string& text) {
  if (text.empty()) return "";
  try {
    parseSlowRankDrill(text);
    return "";
  } catch (const ConfigError&) {
    return "RANK:FRACTION, a rank >= 0 and a fraction above 0 and at most 10 (0.5: steps take 50% longer)";
  }
}

DTRAIN_SETTING_CHECKED(std::string, kFaultSlowRank, "fault-slow-rank", "DTRAIN_FAULT_SLOW_RANK", "",
                       "Testing aid for straggler drills: RANK:FRACTION makes that rank of `dtrain train` spend, at "
                       "the start of each step, FRACTION x the compute time of its previous step more (on CUDA "
                       "asleep while its GPU idles, on the CPU computing; 0.5: its steps take 50% longer), so the "
                       "other ranks wait for it in their collectives and straggler detection flags it.",
                       checkSlowRank);

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

SlowRankDrill parseSlowRankDrill(const std::string& spec) {
  const std::string what = "DTRAIN_FAULT_SLOW_RANK='" + spec + "'";
  const size_t colon = spec.find(':');
  if (colon == std::string::npos || spec.find(':', colon + 1) != std::string::npos) {
    throw ConfigError(what + " is not RANK:FRACTION (e.g. 1:0.5, rank 1's steps 50% longer)");
  }
  SlowRankDrill drill;
  const int64_t rank = parseInt64(spec.substr(0, colon), what + " rank");
  if (rank < 0 || rank > (1 << 24)) throw ConfigError(what + ": the rank must be >= 0");
  drill.rank = static_cast<int>(rank);
  drill.fraction = parseDouble(spec.substr(colon + 1), what + " fraction");
  if (!(drill.fraction > 0) || drill.fraction > 10) {
    throw ConfigError(what + ": the fraction must be above 0 and at most 10 (0.5: 50% longer)");
  }
  return drill;
}

std::optional<SlowRankDrill> faultSlowRankSetting() {
  const std::string spec = kFaultSlowRank.get();
  if (spec.empty()) return std::nullopt;
  return parseSlowRankDrill(spec);
}

}  // namespace dtrain
