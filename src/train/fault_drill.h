// FaultDrill: the restart drill's test seam (a TrainObserver). With
// DTRAIN_FAULT_KILL_AT=RANK:STEP, rank RANK SIGKILLs itself once STEP steps
// are done, in the first attempt of a job only (TORCHELASTIC_RESTART_COUNT
// 0 or unset), so that tests can kill a worker at a known step and check
// the group recovers. The training loop knows nothing of it: the trainer
// adds it to the observers when the setting is given. (private to train/)
#pragma once

#include <cstdint>
#include <memory>

#include "train/train_observer.h"

namespace dtrain {

class FaultDrill : public TrainObserver {
 public:
  // The drill of this rank from the environment, or nullptr when there is
  // none. ConfigError when DTRAIN_FAULT_KILL_AT is not RANK:STEP.
  static std::unique_ptr<FaultDrill> fromEnvironment(int rank);

  FaultDrill(int rank, int64_t kill_after_steps) : rank_(rank), kill_after_(kill_after_steps) {}
  void stepFinished(int64_t step, bool graphed) override;

 private:
  int rank_;
  int64_t kill_after_;
};

}  // namespace dtrain
