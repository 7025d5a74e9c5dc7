// TrainObserver: what the training loop tells everything that watches it —
// the progress display, the Prometheus metrics, the Chrome trace, the
// restart drill. The loop calls observers; it never reaches into them, and
// they never reach into DataParallel (bucket timings come from a
// BucketTimer the loop samples). (private to train/)
//
// Calls come on the training thread, in this order per step: dataWaited,
// stepStarting, stepFinished, each with the step's index (0-based: the
// steps done before it); stragglerWindow after the step that ends a
// straggler window; intervalEnded every --log-every steps and at the last
// step; evaluated after each evaluation; finished once at the end.
// Observers should not throw: an exception ends the job like any other.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/bucket_timer.h"
#include "train/task.h"

namespace dtrain {

struct StepReport {
  int64_t step = 0;          // steps done so far (global)
  int64_t total_steps = 0;
  int64_t epoch = 0;         // 0-based
  int64_t epochs = 0;
  double loss = 0;           // mean over the steps since the last report
  double lr = 0;
  double samples_per_s = 0;  // all ranks, since the last report
  double tokens_per_s = 0;   // language models (else 0): samples_per_s x tokens per sample
  double mfu = -1;           // model FLOPs utilisation, 0..1 (-1: unknown peak or not a GPU)
  double elapsed_s = 0;
  int64_t steps_in_interval = 0;
  // A pipeline's bubble in the interval's last step: idle over the span of
  // its schedule, the mean over every rank (-1: not a pipeline).
  double pp_bubble = -1;
};

struct EvalReport {
  int64_t epoch = 0;
  int64_t step = 0;
  Evaluation result;
};

struct RunSummary {
  Evaluation final_eval;
  int64_t steps = 0;
  int64_t samples = 0;  // approximate: the last batch of an epoch may be smaller on some ranks
  int64_t tokens = 0;   // language models: samples x tokens per sample (else 0)
  double wall_s = 0;
  double train_s = 0;   // the training steps alone (evaluations and checkpoints excluded)
  double mfu = -1;      // over train_s (-1: unknown)
  int64_t peak_memory_bytes = 0;  // the allocator's peak on this rank's GPU (0 on the CPU)
  int world_size = 1;
};

// One window of straggler detection (train/straggler_monitor.h), the same
// on every rank.
struct StragglerReport {
  int64_t step = 0;              // steps done when the window ended
  int64_t window = 0;            // 0-based
  int64_t window_steps = 0;      // --straggler-window
  double median_s = 0;           // the median of the ranks' compute times per step
  std::vector<double> seconds;   // per rank: the median compute time of its steps in the window
  std::vector<double> ratio;     // per rank: seconds / median_s
  std::vector<int> flagged;      // ranks flagged as stragglers after this window
};

class TrainObserver {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~TrainObserver() = default;

  // The host waited from begin to end for the batch of step `step`.
  virtual void dataWaited(int64_t step, Clock::time_point begin, Clock::time_point end) {}
  virtual void stepStarting(int64_t step, int64_t samples_on_this_rank) {}
  // The step's work is queued; it was replayed from a CUDA graph or not.
  virtual void stepFinished(int64_t step, bool graphed) {}
  // `sampled`: the last backward's bucket timings when it ran eagerly and
  // was timed, else nullptr.
  virtual void intervalEnded(const StepReport& report, const BackwardTimeline* sampled) {}
  virtual void evaluated(const EvalReport& report) {}
  // After each straggler window (every rank, when detection runs).
  virtual void stragglerWindow(const StragglerReport& report) {}
  // A line for the user (rank 0 shows it).
  virtual void message(const std::string& text) {}
  virtual void finished(const RunSummary& summary) {}
};

// Calls each of its observers in the order they were added.
class ObserverList : public TrainObserver {
 public:
  void add(std::unique_ptr<TrainObserver> observer) { owned_.push_back(std::move(observer)); }
  // Called before the others (a watcher that times the step itself).
  void addFirst(std::unique_ptr<TrainObserver> observer) { owned_.insert(owned_.begin(), std::move(observer)); }

  void dataWaited(int64_t step, Clock::time_point begin, Clock::time_point end) override {
    for (auto& o : owned_) o->dataWaited(step, begin, end);
  }
  void stepStarting(int64_t step, int64_t samples) override {
    for (auto& o : owned_) o->stepStarting(step, samples);
  }
  void stepFinished(int64_t step, bool graphed) override {
    for (auto& o : owned_) o->stepFinished(step, graphed);
  }
  void intervalEnded(const StepReport& report, const BackwardTimeline* sampled) override {
    for (auto& o : owned_) o->intervalEnded(report, sampled);
  }
  void evaluated(const EvalReport& report) override {
    for (auto& o : owned_) o->evaluated(report);
  }
  void stragglerWindow(const StragglerReport& report) override {
    for (auto& o : owned_) o->stragglerWindow(report);
  }
  void message(const std::string& text) override {
    for (auto& o : owned_) o->message(text);
  }
  void finished(const RunSummary& summary) override {
    for (auto& o : owned_) o->finished(summary);
  }

 private:
  std::vector<std::unique_ptr<TrainObserver>> owned_;
};

}  // namespace dtrain
