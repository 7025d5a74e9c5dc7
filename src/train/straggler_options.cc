#include "train/straggler_options.h"

#include "common/error.h"
#include "common/options.h"

namespace dtrain {

const char* stragglerActionName(StragglerAction action) { return action == StragglerAction::kStop ? "stop" : "warn"; }

void declareStragglerOptions(OptionSet& set, StragglerOptions& o) {
  set.integer("--straggler-window", o.window,
              "Straggler detection: every N steps the ranks share the median of their compute time per step "
              "(the step less the time spent waiting in collectives) with one all-gather of a float")
      .range(1, 1'000'000)
      .unit("steps");
  set.number("--straggler-threshold", o.threshold,
             "Straggler detection: a rank is slow in a window when its median compute time is at least this "
             "much above the median of all ranks (0.10: 10% slower)")
      .above(0)
      .atMost(100);
  set.integer("--straggler-patience", o.patience,
              "Straggler detection: consecutive slow windows before a rank is flagged (a window at normal speed "
              "starts the count again)")
      .range(1, 1'000'000)
      .unit("windows");
  set.choice("--on-straggler", o.action, {{"warn", StragglerAction::kWarn}, {"stop", StragglerAction::kStop}},
             "What a flagged straggler does: warn (rank 0 logs the rank, host and GPU with its clocks and "
             "throttle reasons) or stop (also every rank writes a checkpoint of the step and exits 75, so a "
             "scheduler can re-place the job without that node; needs --checkpoint-dir)");
}

void checkStragglerRun(const StragglerOptions& options, bool has_checkpoint_dir) {
  if (options.action == StragglerAction::kStop && !has_checkpoint_dir) {
    throw ConfigError("--on-straggler stop: the ranks checkpoint before they exit 75, so it needs --checkpoint-dir");
  }
}

}  // namespace dtrain
