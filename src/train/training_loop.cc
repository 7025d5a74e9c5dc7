#include "train/training_loop.h"

#include <algorithm>
#include <cmath>

#include "gpu/mfu.h"
#include "train/device_memory_stats.h"

namespace dtrain {

LrScheduleOptions scheduleFor(const ScheduleOptions& given, double base_lr, int64_t steps_per_epoch) {
  const ScheduleOptions options = withImageDefaults(given);  // what was not given nor resolved by model kind
  LrScheduleOptions s;
  s.kind = scheduleName(options.kind);  // the library API (dtrain/lr_schedule.h) takes the word
  s.base_lr = base_lr;
  s.min_lr = options.min_lr;
  // The run's length: its epochs, or --max-steps when that ends it sooner.
  s.total_steps = steps_per_epoch * options.epochs;
  if (options.max_steps > 0) s.total_steps = std::min(s.total_steps, options.max_steps);
  if (options.warmup_steps >= 0) {
    s.warmup_steps = options.warmup_steps;
  } else if (options.warmup_share > 0) {
    // A share of the run (the language models' default), at most the cap.
    s.warmup_steps = std::clamp<int64_t>(
        static_cast<int64_t>(std::llround(options.warmup_share * static_cast<double>(s.total_steps))), 1,
        std::max<int64_t>(1, options.warmup_cap));
    if (options.kind == ScheduleKind::kCosine) {
      s.warmup_steps = std::min(s.warmup_steps, std::max<int64_t>(0, s.total_steps - 1));
    }
  } else {
    // A warm-up in epochs is cut short by a run shorter than it.
    s.warmup_steps = static_cast<int64_t>(std::llround(options.warmup_epochs * static_cast<double>(steps_per_epoch)));
    if (options.kind == ScheduleKind::kCosine) {
      s.warmup_steps = std::min(s.warmup_steps, std::max<int64_t>(0, s.total_steps - 1));
    }
  }
  const double step_epochs =
      options.step_epochs > 0 ? options.step_epochs : std::max(1.0, static_cast<double>(options.epochs) / 3.0);
  s.step_size =
      std::max<int64_t>(1, static_cast<int64_t>(std::llround(step_epochs * static_cast<double>(steps_per_epoch))));
  s.gamma = options.gamma;
  validate(s);
  return s;
}

TrainingLoop::TrainingLoop(TrainingJob& job, Task& task, BatchSource& batches, JobCheckpoint& checkpoint,
                           TrainObserver& observers, const BucketTimer* timer, const LoopSettings& settings,
                           const LrScheduleOptions& schedule)
    : job_(job),
      task_(task),
      batches_(batches),
      checkpoint_(checkpoint),
      observers_(observers),
      timer_(timer),
      settings_(settings),
      schedule_(schedule),
      steps_per_epoch_(batches.batchesPerEpoch()),
      total_steps_(steps_per_epoch_ * settings.epochs) {
  if (settings_.max_steps > 0) total_steps_ = std::min(total_steps_, settings_.max_steps);
}

void TrainingLoop::run(const TrainPosition& start, Clock::time_point wall_start) {
  wall_start_ = wall_start;
  interval_start_ = Clock::now();
  step_ = start.step;
  next_ = start;
  bool more = step_ < total_steps_;
  for (int64_t epoch = start.epoch; epoch < settings_.epochs && more; ++epoch) {
    more = trainEpoch(epoch, epoch == start.epoch ? start.batch : 0);
    if (stopped_) return;
    if (more) next_ = TrainPosition{epoch + 1, 0, step_};
    const bool last_epoch = !more || epoch + 1 == settings_.epochs;
    if (more && settings_.checkpoint_every == 0) {
      checkpoint_.save(nextPosition(epoch + 1, 0, step_, steps_per_epoch_));
    }
    if (!evaluated_last_ && ((settings_.eval_every > 0 && (epoch + 1) % settings_.eval_every == 0) || last_epoch)) {
      evaluate(epoch);
    }
  }
}

bool TrainingLoop::trainEpoch(int64_t epoch, int64_t first_batch) {
  batches_.startEpoch(epoch, first_batch);
  job_.model().train();
  while (true) {
    const auto wait_begin = Clock::now();
    std::optional<TrainBatch> batch = batches_.next();
    if (!batch) return true;
    trainStep(*batch, epoch, wait_begin, Clock::now());
    if (step_ >= total_steps_) return false;
    if ((stop_ != nullptr && stop_->stopAfter()) || (stop_when_ && stop_when_())) {
      stopped_ = true;
      return false;
    }
  }
}

void TrainingLoop::trainStep(const TrainBatch& batch, int64_t epoch, Clock::time_point wait_begin,
                             Clock::time_point wait_end) {
  const int64_t index = step_;
  observers_.dataWaited(index, wait_begin, wait_end);
  observers_.stepStarting(index, batch.samples);
  const double lr = learningRateAt(schedule_, index);
  job_.optimizer().setLr(lr);
  // A pipeline times the step that ends an interval (one host wait for its events).
  PipelineModel* pipeline = job_.pipeline();
  const bool reported = (index + 1) % settings_.log_every == 0 || index + 1 == total_steps_;
  if (pipeline != nullptr && reported) pipeline->startTiming();
  job_.step().run(StepBatch{batch.inputs, batch.targets, batch.positions});
  if (pipeline != nullptr && reported) last_bubble_ = pipeline->takeTiming().bubble();
  observers_.stepFinished(index, job_.step().lastStepGraphed());
  ++step_;
  ++steps_in_interval_;
  const int64_t samples = batch.samples * job_.dataRanks();
  interval_samples_ += samples;
  samples_trained_ += samples;
  evaluated_last_ = false;
  next_ = nextPosition(epoch, batch.index + 1, step_, steps_per_epoch_);
  if (settings_.checkpoint_every > 0 && step_ % settings_.checkpoint_every == 0) checkpoint_.save(next_);
  if (step_ % settings_.log_every == 0 || step_ == total_steps_) endInterval(epoch, lr);
  if (settings_.eval_steps > 0 && step_ % settings_.eval_steps == 0) {
    evaluate(epoch);
  }
}

double TrainingLoop::mfu(double samples_per_s) const {
  return gpu::modelFlopsUtilisation(samples_per_s, settings_.flops_per_sample, job_.context().size(),
                                    settings_.peak_flops_per_device);
}

// Every rank: its metrics; rank 0 also the progress line.
void TrainingLoop::endInterval(int64_t epoch, double lr) {
  const auto now = Clock::now();
  const double seconds = std::chrono::duration<double>(now - interval_start_).count();
  StepReport r;
  r.step = step_;
  r.total_steps = total_steps_;
  r.epoch = epoch;
  r.epochs = settings_.epochs;
  r.loss = job_.lossSum().item<double>() / static_cast<double>(std::max<int64_t>(1, steps_in_interval_));
  r.lr = lr;
  r.samples_per_s = seconds > 0 ? static_cast<double>(interval_samples_) / seconds : 0;
  r.tokens_per_s = r.samples_per_s * static_cast<double>(task_.tokensPerSample());
  r.mfu = mfu(r.samples_per_s);
  train_seconds_ += seconds;
  r.elapsed_s = std::chrono::duration<double>(now - wall_start_).count();
  r.steps_in_interval = steps_in_interval_;
  if (job_.pipeline() != nullptr) {
    std::vector<double> bubble{last_bubble_};
    job_.context().allreduceSum(bubble);  // every rank ends the interval
    r.pp_bubble = bubble[0] / job_.context().size();
  }
  const bool sampled = timer_ != nullptr && timer_->backwards() > 0 && !job_.step().lastStepGraphed();
  const BackwardTimeline backward = sampled ? timer_->last() : BackwardTimeline{};
  observers_.intervalEnded(r, sampled ? &backward : nullptr);
  job_.step().zeroLossSum();
  steps_in_interval_ = 0;
  interval_samples_ = 0;
  interval_start_ = now;
}

void TrainingLoop::evaluate(int64_t epoch) {
  const auto begin = Clock::now();
  job_.dataParallel().syncBuffers();
  last_eval_ = task_.evaluate(job_.model(), job_.context(), {job_.dataRank(), job_.dataRanks(), job_.plan().tp * job_.plan().pp},
                              job_.precision());
  evaluated_last_ = true;
  observers_.evaluated(EvalReport{epoch, step_, last_eval_});
  interval_start_ += Clock::now() - begin;  // an evaluation is not training time
}

int64_t TrainingLoop::stopAt() {
  checkpoint_.save(next_);
  return step_;
}

RunSummary TrainingLoop::finish() {
  // A run that stops at --max-steps mid-epoch is judged like one that
  // finished its epochs.
  if (!evaluated_last_) evaluate(std::max<int64_t>(0, (step_ - 1) / std::max<int64_t>(1, steps_per_epoch_)));
  checkpoint_.save(next_);
  RunSummary summary;
  summary.final_eval = last_eval_;
  summary.steps = step_;
  summary.samples = samples_trained_;
  summary.tokens = samples_trained_ * task_.tokensPerSample();
  summary.wall_s = std::chrono::duration<double>(Clock::now() - wall_start_).count();
  summary.train_s = train_seconds_;
  summary.mfu = train_seconds_ > 0 ? mfu(static_cast<double>(samples_trained_) / train_seconds_) : -1;
  summary.world_size = job_.context().size();
  summary.peak_memory_bytes = peakAllocatedBytes(job_.device());
  return summary;
}

}  // namespace dtrain
