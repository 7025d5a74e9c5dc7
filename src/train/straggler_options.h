// The straggler flags of `dtrain train` (--straggler-window,
// --straggler-threshold, --straggler-patience, --on-straggler): their
// struct and declaration. Torch-free, like train_options.h; what they
// drive is train/straggler_monitor.h, the decision straggler_detector.h.
#pragma once

#include <cstdint>

namespace dtrain {

class OptionSet;

// What a flagged straggler does to the job: a warning line, or every rank
// checkpoints and exits 75 (EX_TEMPFAIL) so a scheduler re-places the job.
enum class StragglerAction { kWarn, kStop };

struct StragglerOptions {
  int64_t window = 20;       // steps per window (each rank's median step is shared once per window)
  double threshold = 0.10;   // a rank is slow in a window at >= (1 + threshold) x the median of the ranks
  int64_t patience = 3;      // consecutive slow windows before a rank is flagged
  StragglerAction action = StragglerAction::kWarn;
};

const char* stragglerActionName(StragglerAction action);

void declareStragglerOptions(OptionSet& set, StragglerOptions& options);
// The rule across options: --on-straggler stop keeps the run's work in a
// checkpoint, so it needs --checkpoint-dir (ConfigError naming both).
void checkStragglerRun(const StragglerOptions& options, bool has_checkpoint_dir);

}  // namespace dtrain
