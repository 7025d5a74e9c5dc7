// TrainingLoop: epochs of steps over a task's batches, with the learning
// rate of each step from the schedule, checkpoints every N steps or at each
// epoch's end, evaluations every N epochs and at the end, and everything
// else told to the observers. (private to train/)
//
// Contract:
// - run(start) resumes at `start` (epoch, batch within it, steps done) and
//   returns when the last epoch is done or max_steps steps are. finish()
//   then evaluates (unless the last epoch just did), writes the final
//   checkpoint and returns the summary of the run. When the stop agreement
//   (setStop) says so after a step, run() returns at once; stopAt() writes
//   the checkpoint of that position (the next batch) and nothing else.
// - The rate of step s is learningRateAt(schedule, s): a resumed job
//   continues its schedule exactly.
// - A checkpoint is written after each step that is a multiple of
//   checkpoint_every, else after each epoch but the last (the trainer writes
//   the final one), with the position of the next batch.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "dtrain/lr_schedule.h"
#include "train/bucket_timer.h"
#include "train/job_checkpoint.h"
#include "train/stop_request.h"
#include "train/task.h"
#include "train/train_observer.h"
#include "train/training_job.h"

namespace dtrain {

struct LoopSettings {
  int64_t epochs = 1;
  int64_t max_steps = 0;         // 0: all epochs
  int64_t log_every = 50;
  int64_t eval_every = 1;        // epochs; 0: at the end only
  int64_t eval_steps = 0;        // also every N steps; 0: off
  int64_t checkpoint_every = 0;  // steps; 0: at each epoch's end
  // For MFU: the model's training FLOPs per sample and one device's peak
  // FLOP/s (0: unknown, MFU not reported).
  double flops_per_sample = 0;
  double peak_flops_per_device = 0;
};

// The schedule of `options` over epochs of `steps_per_epoch` steps (warm-up
// in epochs or --warmup-steps, step size in epochs), over --max-steps when
// that ends the run first. ConfigError when it is invalid.
LrScheduleOptions scheduleFor(const ScheduleOptions& options, double base_lr, int64_t steps_per_epoch);

class TrainingLoop {
 public:
  // `timer`: the bucket timings sampled at each interval (nullptr: none).
  TrainingLoop(TrainingJob& job, Task& task, BatchSource& batches, JobCheckpoint& checkpoint,
               TrainObserver& observers, const BucketTimer* timer, const LoopSettings& settings,
               const LrScheduleOptions& schedule);

  // Asked after every step whether every rank stops there (nullptr: never).
  void setStop(StopAgreement* stop) { stop_ = stop; }
  // Also asked after every step (after the agreement): true stops the run
  // there as a signal does. It must answer the same on every rank at the
  // same step (the straggler monitor's verdict is).
  void setStopWhen(std::function<bool()> stop) { stop_when_ = std::move(stop); }
  int64_t totalSteps() const { return total_steps_; }
  // run() returned early because a stop was agreed: stopAt() then writes
  // the checkpoint of where the run is (instead of finish()) and returns
  // the steps done.
  bool stopped() const { return stopped_; }
  int64_t stopAt();
  int64_t stepsPerEpoch() const { return steps_per_epoch_; }
  // `wall_start`: when the job started, for the summary's wall time.
  void run(const TrainPosition& start, std::chrono::steady_clock::time_point wall_start);
  RunSummary finish();

 private:
  using Clock = std::chrono::steady_clock;
  // False once the last step is done.
  bool trainEpoch(int64_t epoch, int64_t first_batch);
  void trainStep(const TrainBatch& batch, int64_t epoch, Clock::time_point wait_begin, Clock::time_point wait_end);
  void endInterval(int64_t epoch, double lr);
  void evaluate(int64_t epoch);
  double mfu(double samples_per_s) const;

  TrainingJob& job_;
  StopAgreement* stop_ = nullptr;
  std::function<bool()> stop_when_;
  bool stopped_ = false;
  Task& task_;
  BatchSource& batches_;
  JobCheckpoint& checkpoint_;
  TrainObserver& observers_;
  const BucketTimer* timer_;
  LoopSettings settings_;
  LrScheduleOptions schedule_;
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;

  // Progress of this run.
  Clock::time_point wall_start_;
  int64_t step_ = 0;
  int64_t steps_in_interval_ = 0;
  int64_t interval_samples_ = 0;
  Clock::time_point interval_start_;
  int64_t samples_trained_ = 0;
  double train_seconds_ = 0;  // summed over intervals: evaluations and checkpoints excluded
  double last_bubble_ = 0;    // a pipeline's: this rank's bubble in the last timed step
  bool evaluated_last_ = false;
  // Where the next step starts; the final checkpoint's position (a run
  // stopped by --max-steps mid-epoch resumes there when given more steps).
  TrainPosition next_{};
  Evaluation last_eval_;
};

}  // namespace dtrain
