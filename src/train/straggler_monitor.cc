#include "train/straggler_monitor.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <string_view>
#include <thread>

#include <fstream>

#include <nlohmann/json.hpp>

#include "comm/world.h"
#include "common/env.h"
#include "common/host.h"
#include "common/log.h"
#include "dtrain/collectives.h"
#include "store/store.h"
#include "train/straggler_device.h"

#if DTRAIN_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "gpu/cuda_check.h"
#endif

namespace dtrain {

// The compute time of each step of a window (see the contract).
class StragglerMonitor::Clock {
 public:
  explicit Clock(torch::Device device) : device_(device) {}
  ~Clock() {
#if DTRAIN_TORCH_CUDA
    for (auto& step : events_) {
      for (cudaEvent_t e : step) cudaEventDestroy(e);
    }
#endif
  }

  void start() {
    cpu_start_ = threadCpuSeconds();
#if DTRAIN_TORCH_CUDA
    if (!device_.is_cuda()) return;
    if (events_.size() <= steps_) events_.push_back(makeEvents());
    synced_.resize(events_.size());
    synced_[steps_] = 0;
    record(kStart, currentStream());
#endif
  }
  // CUDA: the stream stops waiting for peers at `stream`'s end of backward
  // and resumes at the optimizer.
  void syncBegins(void* stream) {
#if DTRAIN_TORCH_CUDA
    if (device_.is_cuda() && recording()) record(kSyncBegin, stream);
#else
    (void)stream;
#endif
  }
  void syncEnds() {
#if DTRAIN_TORCH_CUDA
    if (device_.is_cuda() && recording() && synced_[steps_] == 1) {
      record(kSyncEnd, currentStream());
      synced_[steps_] = 2;
    }
#endif
  }
  void finish() {
    if (!device_.is_cuda()) {
      cpu_.push_back(std::max(0.0, threadCpuSeconds() - cpu_start_));
      ++steps_;
      return;
    }
#if DTRAIN_TORCH_CUDA
    record(kEnd, currentStream());
    ++steps_;
#endif
  }
  // The drill: waits until the device reached this step's start (CUDA) and
  // returns the compute time of the step before it (-1: not known).
  double previousStep() {
    if (!device_.is_cuda()) return cpu_.empty() ? -1 : cpu_.back();
#if DTRAIN_TORCH_CUDA
    DTRAIN_CUDA_CHECK(cudaEventSynchronize(events_[steps_][kStart]));
    if (steps_ > 0) return seconds(steps_ - 1);
#endif
    return -1;
  }
  // The compute seconds of every step since the last take() (CUDA: waits
  // for the last one to end).
  std::vector<double> take() {
    std::vector<double> out;
    out.swap(cpu_);
#if DTRAIN_TORCH_CUDA
    if (device_.is_cuda() && steps_ > 0) {
      DTRAIN_CUDA_CHECK(cudaEventSynchronize(events_[steps_ - 1][kEnd]));
      for (size_t s = 0; s < steps_; ++s) out.push_back(seconds(s));
    }
#endif
    steps_ = 0;
    return out;
  }

 private:
  torch::Device device_;
  double cpu_start_ = 0;  // the thread's CPU time at the step's start
  std::vector<double> cpu_;
  size_t steps_ = 0;  // steps finished in this window
#if DTRAIN_TORCH_CUDA
  enum { kStart, kSyncBegin, kSyncEnd, kEnd };
  std::vector<std::array<cudaEvent_t, 4>> events_;
  std::vector<char> synced_;  // per step: 0 none, 1 end of backward seen, 2 both marks

  bool recording() const { return steps_ < events_.size(); }
  void* currentStream() const {
    return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_.index())).stream();
  }
  static std::array<cudaEvent_t, 4> makeEvents() {
    std::array<cudaEvent_t, 4> events{};
    for (cudaEvent_t& e : events) DTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDefault));
    return events;
  }
  void record(int which, void* stream) {
    DTRAIN_CUDA_CHECK(cudaEventRecord(events_[steps_][static_cast<size_t>(which)], static_cast<cudaStream_t>(stream)));
    if (which == kSyncBegin) synced_[steps_] = 1;
  }
  double seconds(size_t step) const {
    const auto& e = events_[step];
    float total = 0, waited = 0;
    DTRAIN_CUDA_CHECK(cudaEventElapsedTime(&total, e[kStart], e[kEnd]));
    if (synced_[step] == 2) DTRAIN_CUDA_CHECK(cudaEventElapsedTime(&waited, e[kSyncBegin], e[kSyncEnd]));
    return std::max(0.0, static_cast<double>(total) - static_cast<double>(waited)) / 1000.0;
  }
#endif
};

StragglerMonitor::StragglerMonitor(const StragglerOptions& options, Context& ctx, TrainObserver& report_to,
                                   int64_t warmup, std::optional<SlowRankDrill> drill)
    : options_(options),
      ctx_(ctx),
      report_to_(report_to),
      warmup_(std::max(warmup, kWarmupSteps)),
      drill_(drill && drill->rank == ctx.rank() ? drill : std::nullopt),
      detector_(ctx.size(), options.threshold, options.patience),
      clock_(std::make_unique<Clock>(ctx.device())) {
  if (drill_) {
    DTRAIN_LOG_WARN("DTRAIN_FAULT_SLOW_RANK: rank " << ctx.rank() << " makes its steps "
                    << static_cast<int>(drill_->fraction * 100 + 0.5) << "% longer");
  }
}

StragglerMonitor::~StragglerMonitor() { detach(); }

void StragglerMonitor::attach(TrainStep& step, DataParallel& dp) {
  if (!ctx_.device().is_cuda()) return;
  step_ = &step;
  dp_ = &dp;
  next_step_observer_ = step.observer();
  next_sync_observer_ = dp.observer();
  step.setObserver(this);
  dp.setObserver(this);
}

void StragglerMonitor::detach() {
  if (step_ != nullptr && step_->observer() == this) step_->setObserver(next_step_observer_);
  if (dp_ != nullptr && dp_->observer() == this) dp_->setObserver(next_sync_observer_);
  step_ = nullptr;
  dp_ = nullptr;
}

void StragglerMonitor::stepStarting(int64_t /*step*/, int64_t /*samples*/) {
  ++seen_;
  measuring_ = ctx_.size() > 1 && seen_ > warmup_;
  if (!measuring_) return;
  clock_->start();
  drill_s_ = 0;
  if (!drill_) return;
  const double previous = clock_->previousStep();
  if (previous >= 0) last_compute_s_ = std::max(0.0, previous - last_drill_s_);
  drill_s_ = drill_->fraction * last_compute_s_;
  last_drill_s_ = drill_s_;
  slowDown(drill_s_);
}

// The drill's extra time, of the kind the clock counts: on CUDA the stream
// idles while the host sleeps (it waited for the step's start); on the CPU
// the thread computes (a sleep is no CPU time, as a collective's wait is not).
void StragglerMonitor::slowDown(double seconds) {
  if (ctx_.device().is_cuda()) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    return;
  }
  const double until = threadCpuSeconds() + seconds;
  volatile double sink = 0;
  while (threadCpuSeconds() < until) {
    for (int i = 0; i < 1000; ++i) sink = sink + 1;
  }
}

void StragglerMonitor::stepFinished(int64_t step, bool /*graphed*/) {
  if (!measuring_) return;
  clock_->finish();
  if (++steps_in_window_ == options_.window) endWindow(step + 1);
}

void StragglerMonitor::endWindow(int64_t steps_done) {
  steps_in_window_ = 0;
  const double local = medianOf(clock_->take());
  torch::Tensor mine = torch::full({1}, local, torch::TensorOptions().dtype(torch::kFloat).device(ctx_.device()));
  const torch::Tensor all = dist::allGather(ctx_, mine).to(torch::kCPU, torch::kDouble);
  const std::vector<double> seconds(all.data_ptr<double>(), all.data_ptr<double>() + all.numel());
  const StragglerVerdict verdict = detector_.observe(seconds);
  StragglerReport report;
  report.step = steps_done;
  report.window = verdict.window;
  report.window_steps = options_.window;
  report.median_s = verdict.median_s;
  report.seconds = seconds;
  report.ratio = verdict.ratio;
  for (int r = 0; r < detector_.ranks(); ++r) {
    if (detector_.flagged(r)) report.flagged.push_back(r);
  }
  report_to_.stragglerWindow(report);
  flag(verdict, seconds);
}

void StragglerMonitor::flag(const StragglerVerdict& verdict, const std::vector<double>& seconds) {
  for (int r : verdict.newly_flagged) {
    const std::string where = describeFlagged(r, verdict.window);
    char numbers[256];
    std::snprintf(numbers, sizeof(numbers),
                  "%.1f ms of compute per step, %.2fx the median of the ranks (%.1f ms), in %lld consecutive windows "
                  "of %lld steps (threshold +%.0f%%)",
                  seconds[static_cast<size_t>(r)] * 1e3, verdict.ratio[static_cast<size_t>(r)], verdict.median_s * 1e3,
                  static_cast<long long>(verdict.slow_windows[static_cast<size_t>(r)]),
                  static_cast<long long>(options_.window), options_.threshold * 100);
    const std::string line = "straggler: rank " + std::to_string(r) + " (" + where + ") took " + numbers;
    if (ctx_.isMain()) DTRAIN_LOG_WARN(line);
    if (options_.action == StragglerAction::kStop && stop_reason_.empty()) stop_reason_ = line;
  }
  for (int r : verdict.recovered) {
    if (ctx_.isMain()) {
      DTRAIN_LOG_INFO("straggler: rank " << r << " is back to normal speed ("
                      << verdict.ratio[static_cast<size_t>(r)] << "x the median in window " << verdict.window << ")");
    }
  }
}

// The flagged rank describes itself under a key every rank reads: only it
// can see its own GPU.
std::string StragglerMonitor::describeFlagged(int rank, int64_t window) {
  const std::string key = "train/straggler/" + std::to_string(window) + "/" + std::to_string(rank);
  Store& store = *ctx_.world().store;
  try {
    StoreDeadlineScope deadline(kDescribeTimeout);
    if (ctx_.rank() == rank) store.set(key, describeRankDevice(ctx_.device()));
    return store.get(key);
  } catch (const std::exception& e) {
    return "its host and GPU unknown: " + std::string(e.what());
  }
}

void StragglerMonitor::phase(const char* name) {
  if (measuring_ && std::string_view(name) == "optimizer") clock_->syncEnds();
  if (next_step_observer_ != nullptr) next_step_observer_->phase(name);
}

void StragglerMonitor::backwardStarted(void* stream) {
  if (next_sync_observer_ != nullptr) next_sync_observer_->backwardStarted(stream);
}
void StragglerMonitor::bucketReady(int bucket, void* stream) {
  if (next_sync_observer_ != nullptr) next_sync_observer_->bucketReady(bucket, stream);
}
void StragglerMonitor::bucketLaunching(int bucket, void* stream) {
  if (next_sync_observer_ != nullptr) next_sync_observer_->bucketLaunching(bucket, stream);
}
void StragglerMonitor::bucketLaunched(int bucket, void* stream) {
  if (next_sync_observer_ != nullptr) next_sync_observer_->bucketLaunched(bucket, stream);
}
void StragglerMonitor::backwardEnded(void* stream) {
  if (measuring_) clock_->syncBegins(stream);
  if (next_sync_observer_ != nullptr) next_sync_observer_->backwardEnded(stream);
}
void StragglerMonitor::bucketCompleted(int bucket) {
  if (next_sync_observer_ != nullptr) next_sync_observer_->bucketCompleted(bucket);
}

void writeStopReasonFile(const std::string& reason) {
  const std::optional<std::string> path = envString("TORCHELASTIC_ERROR_FILE");
  if (!path || path->empty()) return;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const nlohmann::json file{
      {"message",
       {{"message", reason},
        {"extraInfo", {{"timestamp", std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count())}}}}}};
  std::ofstream out(*path, std::ios::trunc);
  out << file.dump() << "\n";
  if (!out) DTRAIN_LOG_WARN("cannot write the stop reason to " << *path);
}

}  // namespace dtrain
