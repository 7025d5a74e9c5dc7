// TrainMetrics: what a training rank reports while it runs (a
// TrainObserver; private to train/).
//
// - `dtrain train --metrics-port P`: rank r serves Prometheus text at
//   http://<host>:(P + LOCAL_RANK)/metrics (and /healthz), labels rank and
//   dtrain_job (not `job`, which Prometheus keeps for its scrape job):
//   every series is this rank's own, so sum by (dtrain_job) gives the job's
//   figure. dtrain_train_steps_total, dtrain_train_samples_total,
//   dtrain_train_step_seconds (histogram of the host's time between step
//   starts; with the GPU kept busy that is the GPU's step time),
//   dtrain_train_samples_per_second (this rank's) and dtrain_train_loss (the
//   last log interval), dtrain_train_allreduce_bytes_total (exact),
//   dtrain_train_allreduce_seconds_total and dtrain_train_overlap_ratio
//   (from one backward sampled per log interval, eager steps only),
//   dtrain_train_data_wait_seconds_total, dtrain_train_gpu_memory_bytes
//   (used on the device), dtrain_train_restarts_total; language models also
//   dtrain_train_tokens_per_second (this rank's) and dtrain_train_mfu
//   (when the GPU's peak is known), and every task dtrain_train_eval_loss
//   (the last evaluation: per token for language models, per sample for
//   classifiers); jobs of several ranks, once the first straggler window
//   has ended, dtrain_rank_step_time_ratio (labels also host: this rank's
//   compute time per step over the median of the ranks', the last window;
//   train/straggler_monitor.h).
// - Rank 0 keeps a status file of the job in its user's folder of the jobs
//   directory (DTRAIN_JOBS_DIR, default /tmp/dtrain-jobs; metrics/
//   job_status.h): <uid>/<job>.json with job, world size, samples/s (the
//   job's), step time, loss, time and the process's identity, rewritten
//   atomically at each log interval and removed at the end; `dtrain
//   exporter` lists those files on its live page.
// - Thread-safe: the training thread updates, the HTTP thread renders.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "train/bucket_timer.h"
#include "train/train_observer.h"

namespace dtrain {

class TrainMetrics : public TrainObserver {
 public:
  TrainMetrics(int rank, int world_size, std::string job, torch::Device device);
  ~TrainMetrics() override;  // stops serving, removes the status file
  TrainMetrics(const TrainMetrics&) = delete;
  TrainMetrics& operator=(const TrainMetrics&) = delete;

  // Serves /metrics on `port` on all interfaces (IoError when taken).
  // Returns the bound port.
  int serve(int port);

  void stepStarted(int64_t samples_this_step);
  void dataWait(double seconds);
  // At each log interval: the interval's rate and mean loss, and (eager
  // steps) the last backward's bucket timings.
  void logInterval(double samples_per_s, double loss, const BackwardTimeline* sampled_backward,
                   int64_t allreduce_bytes_per_step, int64_t steps_in_interval);

  // As an observer of the training loop; intervals count
  // `allreduce_bytes_per_step` bytes per step.
  void setAllreduceBytesPerStep(int64_t bytes) { allreduce_bytes_per_step_ = bytes; }
  void dataWaited(int64_t step, Clock::time_point begin, Clock::time_point end) override;
  void stepStarting(int64_t step, int64_t samples) override { stepStarted(samples); }
  void intervalEnded(const StepReport& report, const BackwardTimeline* sampled) override;
  void evaluated(const EvalReport& report) override;
  void stragglerWindow(const StragglerReport& report) override;

  std::string render() const;
  const std::string& job() const { return job_; }
  // The job id: DTRAIN_JOB_ID, else TORCHELASTIC_RUN_ID, else "pid-<pid>".
  static std::string jobIdFromEnvironment();
  // DTRAIN_JOBS_DIR or /tmp/dtrain-jobs.
  static std::string jobsDirectory();

 private:
  void writeStatusFile() const;  // rank 0, under mutex_

  const int rank_, world_size_;
  const std::string job_;
  const torch::Device device_;
  const int64_t restarts_;
  int64_t allreduce_bytes_per_step_ = 0;
  mutable std::mutex mutex_;
  std::vector<double> bucket_bounds_;    // step-time histogram upper bounds, seconds
  std::vector<int64_t> bucket_counts_;   // per bound, not cumulative
  int64_t step_count_ = 0, sample_count_ = 0;
  double step_seconds_sum_ = 0;
  std::chrono::steady_clock::time_point last_step_start_;
  bool have_last_step_ = false;
  double samples_per_s_ = 0, loss_ = 0, last_step_ms_ = 0;
  double tokens_per_s_ = 0, mfu_ = -1;      // language models; mfu_ -1: unknown
  std::optional<double> eval_loss_;
  std::optional<double> step_time_ratio_;  // the last straggler window's
  double allreduce_seconds_ = 0, allreduce_bytes_ = 0, overlap_ratio_ = 0, data_wait_seconds_ = 0;
  bool overlap_known_ = false;
  struct Server;
  std::unique_ptr<Server> server_;
  std::string status_path_;
};

}  // namespace dtrain
