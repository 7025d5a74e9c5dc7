// Stopping `dtrain train` on a signal without losing work (private to
// train/): SIGUSR1 (Slurm's time-limit warning), SIGTERM (preemption,
// `dtrain launch` or torchrun stopping the workers) and SIGINT (Ctrl-C)
// ask the run to stop; the step in flight finishes, every rank stops after
// the same step, a checkpoint of that step is written, and the process
// exits with kExitStoppedAfterCheckpoint (75, EX_TEMPFAIL: run again to go
// on; common/process.h), which deploy/slurm/dtrain.sbatch turns into a
// requeue.
//
// Contract:
// - StopSignals installs the handlers for its lifetime (restoring the
//   previous ones after). Until deferFromNowOn() — called as the training
//   loop starts — a stop signal ends the process at once with 128 + the
//   signal's number, saying so on stderr: waiting for peers, reading data
//   or a checkpoint, there is nothing to save and no step to finish.
//   From then on the first of the three signals is recorded; a
//   SIGINT or SIGTERM that comes again more than 2 s later ends the process
//   at once with the default action (a user who presses Ctrl-C twice means
//   it; a launcher's deadline has passed). Repeats within 2 s are the same
//   event delivered twice (Slurm signals every process of a step and the
//   launcher forwards it too) and are ignored, as are repeated SIGUSR1s.
// - StopAgreement::stopAfter() is called by every rank after each step. Ranks may see a signal at different steps; they agree through a
//   sum of their flags over all ranks (Context::allreduceSum), taken at the
//   same steps on every rank: after each of the first kCalibrationSteps
//   steps, then every `interval()` steps, the interval chosen by rank 0 at
//   step kCalibrationSteps (and shared by that sum) so that a check comes
//   about every kCheckPeriod of training: a host synchronisation a second,
//   not a step. A single-rank job checks its own flag after every step.
// - Every rank returns true after the same step; signal() then names the
//   signal most ranks had received by then (the same on every rank).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/process.h"  // kExitStoppedAfterCheckpoint

namespace dtrain {

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // From here on a stop signal waits for the step in flight (before: the
  // process ends at once).
  static void deferFromNowOn();
  // The first signal received since deferFromNowOn() (0: none).
  static int received();
  // For tests: forget the recorded signal.
  static void reset();
};

class StopAgreement {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int64_t kCalibrationSteps = 8;
  static constexpr std::chrono::milliseconds kCheckPeriod{1000};

  // `sum`: sums the values over every rank, in place, on every rank at
  // once (a collective); `local`: this rank's received signal (0: none).
  StopAgreement(int rank, int size, std::function<void(std::vector<double>&)> sum, std::function<int()> local);

  // After each step of this run.
  bool stopAfter();
  int signal() const { return signal_; }
  int64_t interval() const { return interval_; }

 private:
  int rank_;
  int size_;
  std::function<void(std::vector<double>&)> sum_;
  std::function<int()> local_;
  int64_t steps_seen_ = 0;  // stopAfter calls so far
  int64_t interval_ = 1;
  Clock::time_point first_step_{};
  int signal_ = 0;
};

}  // namespace dtrain
