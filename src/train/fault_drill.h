// FaultDrill: the restart and stop drills' test seam (a TrainObserver).
// With DTRAIN_FAULT_KILL_AT=RANK:STEP, rank RANK SIGKILLs itself once STEP
// steps are done, in the first attempt of a job only
// (TORCHELASTIC_RESTART_COUNT 0 or unset), so that tests can kill a worker
// at a known step and check the group recovers. With
// DTRAIN_FAULT_SIGNAL_AT=RANK:STEP:SIGNAL[:parent] it sends SIGNAL (USR1,
// TERM, INT) to itself or to its parent (the launcher) instead, once. The training loop knows nothing of it: the trainer
// adds it to the observers when the setting is given. (private to train/)
#pragma once

#include <cstdint>
#include <memory>

#include "train/train_observer.h"

namespace dtrain {

class FaultDrill : public TrainObserver {
 public:
  // The drill of this rank from the environment, or nullptr when there is
  // none. ConfigError when DTRAIN_FAULT_KILL_AT is not RANK:STEP or
  // DTRAIN_FAULT_SIGNAL_AT not RANK:STEP:SIGNAL[:parent].
  static std::unique_ptr<FaultDrill> fromEnvironment(int rank);

  // signal 0: SIGKILL itself; else send `signal` to itself or its parent.
  FaultDrill(int rank, int64_t after_steps, int signal = 0, bool to_parent = false)
      : rank_(rank), after_(after_steps), signal_(signal), to_parent_(to_parent) {}
  void stepFinished(int64_t step, bool graphed) override;

 private:
  int rank_;
  int64_t after_;
  int signal_;
  bool to_parent_;
};

}  // namespace dtrain
