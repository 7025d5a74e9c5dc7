#include "train/train_metrics.h"

#include "train/device_memory_stats.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#if DTRAIN_TRAIN_HTTP
#include <httplib.h>
#endif

#include "common/env.h"
#include "common/error.h"
#include "common/host.h"
#include "common/log.h"
#include "common/socket.h"
#include "metrics/job_status.h"
#include "metrics/prometheus_text.h"

#if DTRAIN_TORCH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dtrain {
namespace {

using metrics::Labels;
using metrics::MetricFamily;
using metrics::MetricType;

double unixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct TrainMetrics::Server {
#if DTRAIN_TRAIN_HTTP
  httplib::Server http;
  std::thread thread;
#endif
};

std::string TrainMetrics::jobIdFromEnvironment() {
  for (const char* name : {"DTRAIN_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    const std::optional<std::string> value = envString(name);
    if (value && !value->empty()) return *value;
  }
  return "pid-" + std::to_string(::getpid());
}

std::string TrainMetrics::jobsDirectory() { return metrics::jobsDirectory(); }

void TrainMetrics::dataWaited(int64_t /*step*/, Clock::time_point begin, Clock::time_point end) {
  dataWait(std::chrono::duration<double>(end - begin).count());
}

void TrainMetrics::intervalEnded(const StepReport& report, const BackwardTimeline* sampled) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tokens_per_s_ = report.tokens_per_s;
    mfu_ = report.mfu;
  }
  logInterval(report.samples_per_s, report.loss, sampled, allreduce_bytes_per_step_, report.steps_in_interval);
}

void TrainMetrics::evaluated(const EvalReport& report) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (report.result.samples > 0) eval_loss_ = report.result.loss;
}

TrainMetrics::TrainMetrics(int rank, int world_size, std::string job, torch::Device device)
    : rank_(rank),
      world_size_(world_size),
      job_(std::move(job)),
      device_(device),
      restarts_([] {
        const std::optional<std::string> r = envString("TORCHELASTIC_RESTART_COUNT");
        return r ? std::atoll(r->c_str()) : 0LL;
      }()),
      bucket_bounds_{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
      bucket_counts_(bucket_bounds_.size() + 1, 0) {
  if (rank_ == 0) status_path_ = metrics::jobStatusPath(jobsDirectory(), job_);
}

TrainMetrics::~TrainMetrics() {
#if DTRAIN_TRAIN_HTTP
  if (server_) {
    server_->http.stop();
    if (server_->thread.joinable()) server_->thread.join();
  }
#endif
  if (!status_path_.empty()) std::remove(status_path_.c_str());
}

int TrainMetrics::serve(int port) {
#if !DTRAIN_TRAIN_HTTP
  (void)port;
  throw ConfigError("--metrics-port: this build of dtrain has no HTTP server (cpp-httplib was not found)");
#else
  // cpp-httplib writes without MSG_NOSIGNAL: a scraper hanging up mid-answer
  // must not kill the rank.
  ::signal(SIGPIPE, SIG_IGN);
  server_ = std::make_unique<Server>();
  // SO_REUSEADDR only: cpp-httplib's default also sets SO_REUSEPORT, which
  // would let a second job bind the same port silently.
  server_->http.set_socket_options([](auto sock) { setReuseAddress(sock); });
  server_->http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(), metrics::kPrometheusContentType);
  });
  server_->http.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  const int bound = port == 0 ? server_->http.bind_to_any_port("0.0.0.0")
                              : (server_->http.bind_to_port("0.0.0.0", port) ? port : -1);
  if (bound < 0) {
    server_.reset();
    throw IoError("--metrics-port: cannot listen on port " + std::to_string(port) + " (taken?)");
  }
  server_->thread = std::thread([this] { server_->http.listen_after_bind(); });
  return bound;
#endif
}

void TrainMetrics::stepStarted(int64_t samples_this_step) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (have_last_step_) {
    const double seconds = std::chrono::duration<double>(now - last_step_start_).count();
    size_t b = 0;
    while (b < bucket_bounds_.size() && seconds > bucket_bounds_[b]) ++b;
    ++bucket_counts_[b];
    step_seconds_sum_ += seconds;
    last_step_ms_ = seconds * 1e3;
  }
  last_step_start_ = now;
  have_last_step_ = true;
  ++step_count_;
  sample_count_ += samples_this_step;
}

void TrainMetrics::dataWait(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  data_wait_seconds_ += seconds;
}

void TrainMetrics::logInterval(double samples_per_s, double loss, const BackwardTimeline* sampled_backward,
                               int64_t allreduce_bytes_per_step, int64_t steps_in_interval) {
  std::lock_guard<std::mutex> lock(mutex_);
  samples_per_s_ = samples_per_s;
  loss_ = loss;
  allreduce_bytes_ += static_cast<double>(allreduce_bytes_per_step * steps_in_interval);
  if (sampled_backward != nullptr && !sampled_backward->buckets.empty()) {
    double busy_ms = 0, hidden_ms = 0;
    for (const auto& b : sampled_backward->buckets) {
      busy_ms += b.end_ms - b.start_ms;
      hidden_ms += std::max(0.0, std::min(b.end_ms, sampled_backward->backward_end_ms) - b.start_ms);
    }
    allreduce_seconds_ += busy_ms / 1e3 * static_cast<double>(steps_in_interval);
    overlap_ratio_ = busy_ms > 0 ? hidden_ms / busy_ms : 1.0;
    overlap_known_ = true;
  }
  if (!status_path_.empty()) writeStatusFile();
}

void TrainMetrics::writeStatusFile() const {
  // The process's identity lets the exporter drop the file of a rank that
  // was killed before it could remove it.
  static const metrics::ProcessIdentity self = metrics::thisProcess();
  nlohmann::json status{{"job", job_},          {"world_size", world_size_}, {"samples_per_s", samples_per_s_},
                        {"step_ms", last_step_ms_}, {"loss", loss_},            {"steps", step_count_},
                        {"t", unixSeconds()},   {"pid", self.pid},           {"start_time", self.start_time},
                        {"pid_ns", self.pid_namespace}, {"restarts", restarts_}};
  if (tokens_per_s_ > 0) status["tokens_per_s"] = tokens_per_s_;
  if (mfu_ >= 0) status["mfu"] = mfu_;
  std::string why;
  if (!metrics::writeJobStatus(status_path_, status.dump(), &why)) {
    DTRAIN_LOG_DEBUG("cannot write the job status file: " << why);
  }
}

namespace {

// dtrain_rank_step_time_ratio, labelled with the host as well.
void addStepTimeRatio(std::vector<metrics::MetricFamily>& families, metrics::Labels labels, double ratio) {
  labels.emplace_back("host", hostName());
  families.emplace_back("dtrain_rank_step_time_ratio",
                        "This rank's compute time per step (collective waits excluded; the median of the last "
                        "straggler window's steps) over the median of every rank's (1 = typical; a straggler is "
                        "above 1 + --straggler-threshold).",
                        metrics::MetricType::kGauge)
      .add(labels, ratio);
}

}  // namespace

void TrainMetrics::stragglerWindow(const StragglerReport& report) {
  if (static_cast<size_t>(rank_) >= report.ratio.size()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  step_time_ratio_ = report.ratio[static_cast<size_t>(rank_)];
}

std::string TrainMetrics::render() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Labels labels{{"dtrain_job", job_}, {"rank", std::to_string(rank_)}};
  std::vector<MetricFamily> families;
  auto add = [&](const char* name, const char* help, MetricType type, double value) {
    families.emplace_back(name, help, type).add(labels, value);
  };
  add("dtrain_train_steps_total", "Training steps started by this rank.", MetricType::kCounter,
      static_cast<double>(step_count_));
  add("dtrain_train_samples_total", "Samples trained on by this rank.", MetricType::kCounter,
      static_cast<double>(sample_count_));
  // samples_per_s_ is the job's (the loop counts this rank's batches times
  // the world size); the series is this rank's share, as every other series
  // here is per rank, so that sum() over the ranks is the job's rate.
  add("dtrain_train_samples_per_second", "Samples per second this rank trained on over the last log interval.",
      MetricType::kGauge, samples_per_s_ / world_size_);
  add("dtrain_train_loss", "Mean training loss over the last log interval.", MetricType::kGauge, loss_);
  if (tokens_per_s_ > 0) {
    add("dtrain_train_tokens_per_second", "Tokens per second this rank trained on over the last log interval "
                                          "(language models).",
        MetricType::kGauge, tokens_per_s_ / world_size_);
  }
  if (mfu_ >= 0) {
    add("dtrain_train_mfu", "Model FLOPs utilisation of the last log interval: the model's training FLOPs per "
                            "second over the GPUs' peak dense FLOP/s (0..1).",
        MetricType::kGauge, mfu_);
  }
  if (eval_loss_) {
    add("dtrain_train_eval_loss", "Loss of the last evaluation on held-out data (per token for language models).",
        MetricType::kGauge, *eval_loss_);
  }
  add("dtrain_train_allreduce_bytes_total", "Gradient bytes all-reduced by this rank.", MetricType::kCounter,
      allreduce_bytes_);
  add("dtrain_train_allreduce_seconds_total",
      "Time the gradient all-reduces ran, estimated from one backward sampled per log interval (eager steps).",
      MetricType::kCounter, allreduce_seconds_);
  if (overlap_known_) {
    add("dtrain_train_overlap_ratio", "Share of the sampled backward's all-reduce time that ran before backward "
                                      "ended (1 = fully hidden).",
        MetricType::kGauge, overlap_ratio_);
  }
  add("dtrain_train_data_wait_seconds_total", "Time the training loop waited for the next batch.",
      MetricType::kCounter, data_wait_seconds_);
  add("dtrain_train_restarts_total", "Restarts of the worker group before this run (TORCHELASTIC_RESTART_COUNT).",
      MetricType::kCounter, static_cast<double>(restarts_));
  if (step_time_ratio_) addStepTimeRatio(families, labels, *step_time_ratio_);
#if DTRAIN_TORCH_CUDA
  if (device_.is_cuda()) {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      add("dtrain_train_gpu_memory_bytes", "Memory in use on this rank's GPU (all processes).", MetricType::kGauge,
          static_cast<double>(total_bytes - free_bytes));
    }
    add("dtrain_train_memory_peak_bytes",
        "Peak memory the training handed out to tensors on this rank's GPU since it started (PyTorch's caching "
        "allocator, as torch.cuda.max_memory_allocated).",
        MetricType::kGauge, static_cast<double>(peakAllocatedBytes(device_)));
  }
#endif
  std::string text = metrics::render(families);
  // The step-time histogram, in the exposition format's histogram layout.
  std::ostringstream h;
  const std::string base = "dtrain_train_step_seconds";
  const std::string label_text = "dtrain_job=\"" + metrics::escapeLabelValue(job_) + "\",rank=\"" +
                                 std::to_string(rank_) + "\"";
  h << "# HELP " << base << " Host time between the starts of consecutive training steps.\n";
  h << "# TYPE " << base << " histogram\n";
  int64_t cumulative = 0;
  for (size_t b = 0; b < bucket_bounds_.size(); ++b) {
    cumulative += bucket_counts_[b];
    h << base << "_bucket{" << label_text << ",le=\"" << metrics::formatValue(bucket_bounds_[b]) << "\"} "
      << cumulative << "\n";
  }
  cumulative += bucket_counts_.back();
  h << base << "_bucket{" << label_text << ",le=\"+Inf\"} " << cumulative << "\n";
  h << base << "_sum{" << label_text << "} " << metrics::formatValue(step_seconds_sum_) << "\n";
  h << base << "_count{" << label_text << "} " << cumulative << "\n";
  return text + h.str();
}

}  // namespace dtrain
