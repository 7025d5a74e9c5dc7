// StragglerMonitor (`dtrain train`'s straggler detection; a TrainObserver,
// private to train/): every rank measures its compute time per step, the
// ranks share it once per window, and a rank slower than the others for
// --straggler-patience windows in a row is flagged.
//
// Contract:
// - A step's compute time is what the rank spent computing it, not waiting
//   in collectives. On the CPU: the CPU time the training thread used from
//   stepStarting to stepFinished (common/host.h's threadCpuSeconds): a
//   thread blocked in a collective's wait (Gloo's block the host) uses
//   none, nor does one that waits for a CPU other processes hold, so the
//   load of a shared machine is not taken for a slow rank.
//   On CUDA (attach() puts it in front of the step's and DataParallel's
//   observers, forwarding to them): CUDA events on the job's stream at the
//   step's start and end, less the span from the end of backward to the
//   optimizer, where the stream waits for the gradients' all-reduce (with
//   --cuda-graphs a replayed step has no such marks and counts whole). The
//   events are read once per window, never per step.
// - The first kWarmupSteps steps it sees (plus a CUDA graph's warm-up and
//   capture) are not measured. Then every `window` steps each rank takes
//   the median of its steps' times (one slow step does not count) and
//   the ranks all-gather one float each; every rank runs the same
//   StragglerDetector over the same vector, so they agree without another
//   collective, and tells the observers (stragglerWindow).
// - A rank flagged in a window writes what it is (straggler_device.h:
//   host, GPU, SM clock, throttle reasons) under a key of the job's store;
//   every rank reads it (at most kDescribeTimeout), and rank 0 logs the
//   flag. With --on-straggler stop every rank then answers stopRequested()
//   true after that step, and stopReason() names the rank and its node.
// - With DTRAIN_FAULT_SLOW_RANK=RANK:FRACTION that rank spends, at the
//   start of each step, FRACTION x the compute time of its previous step
//   more: on CUDA asleep after its stream reached the step (the GPU idles),
//   on the CPU computing (a sleep uses no CPU time). Its peers wait for it
//   in their collectives as they would for a slow GPU or CPU.
// - A job of one rank has nobody to compare with: nothing is measured.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/data_parallel.h"
#include "dtrain/init.h"
#include "train/straggler_detector.h"
#include "train/straggler_options.h"
#include "train/train_observer.h"
#include "train/train_settings.h"
#include "train/train_step.h"

namespace dtrain {

class StragglerMonitor : public TrainObserver, public StepObserver, public GradSyncObserver {
 public:
  static constexpr int64_t kWarmupSteps = 2;
  static constexpr std::chrono::seconds kDescribeTimeout{30};

  // `report_to`: the observers told of each window (this one among them is
  // fine). `warmup`: steps before measuring (at least kWarmupSteps).
  StragglerMonitor(const StragglerOptions& options, Context& ctx, TrainObserver& report_to, int64_t warmup,
                   std::optional<SlowRankDrill> drill);
  ~StragglerMonitor() override;
  StragglerMonitor(const StragglerMonitor&) = delete;
  StragglerMonitor& operator=(const StragglerMonitor&) = delete;

  // CUDA: observe the step's phases and the end of backward (see the
  // contract), forwarding to the observers attached before; detach()
  // puts them back. Nothing on the CPU.
  void attach(TrainStep& step, DataParallel& dp);
  void detach();

  bool stopRequested() const { return !stop_reason_.empty(); }
  const std::string& stopReason() const { return stop_reason_; }

  void stepStarting(int64_t step, int64_t samples) override;
  void stepFinished(int64_t step, bool graphed) override;

  void phase(const char* name) override;
  void backwardStarted(void* stream) override;
  void bucketReady(int bucket, void* stream) override;
  void bucketLaunching(int bucket, void* stream) override;
  void bucketLaunched(int bucket, void* stream) override;
  void backwardEnded(void* stream) override;
  void bucketCompleted(int bucket) override;

 private:
  class Clock;
  void slowDown(double seconds);
  void endWindow(int64_t step);
  // The lines and the stop of the ranks flagged in `verdict`.
  void flag(const StragglerVerdict& verdict, const std::vector<double>& seconds);
  std::string describeFlagged(int rank, int64_t window);

  StragglerOptions options_;
  Context& ctx_;
  TrainObserver& report_to_;
  int64_t warmup_;
  std::optional<SlowRankDrill> drill_;
  StragglerDetector detector_;
  std::unique_ptr<Clock> clock_;
  int64_t seen_ = 0;                // steps started
  bool measuring_ = false;          // the step in flight is measured
  std::vector<double> window_;      // compute seconds of this window's steps
  double last_compute_s_ = 0;       // the previous step's, without the drill's time
  double drill_s_ = 0;              // the drill's extra time in the step in flight
  double last_drill_s_ = 0;         // ... and in the step before it
  int64_t steps_in_window_ = 0;
  std::string stop_reason_;
  TrainStep* step_ = nullptr;
  DataParallel* dp_ = nullptr;
  StepObserver* next_step_observer_ = nullptr;
  GradSyncObserver* next_sync_observer_ = nullptr;
};

// Writes `reason` as torchrun's error file (TORCHELASTIC_ERROR_FILE, which
// `dtrain launch` sets for each worker and reads to say why its workers
// stopped); nothing without the variable. A file that cannot be written
// is logged, not thrown: the stop goes on.
void writeStopReasonFile(const std::string& reason);

}  // namespace dtrain
