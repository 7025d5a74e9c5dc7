#include "comm/nccl/watchdog.h"

#include <algorithm>

#include "comm/progress_tracker.h"
#include "common/error.h"
#include "common/log.h"

namespace dtrain {

NcclWatchdog::NcclWatchdog(NcclCommHandle& comm, ProgressTracker& progress, int device, std::string where,
                           Milliseconds poll_interval)
    : comm_(comm),
      progress_(progress),
      device_(device),
      where_(std::move(where)),
      poll_interval_(poll_interval),
      thread_(&NcclWatchdog::run, this) {}

NcclWatchdog::~NcclWatchdog() { stop(); }

void NcclWatchdog::track(std::shared_ptr<NcclWork> work) {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_) {
      outstanding_.push_back(std::move(work));
      return;
    }
    reason = reason_;
  }
  work->abandon();
  work->finishFailed(std::make_exception_ptr(
      CommError("nccl " + work->label() + " failed: the communicator is broken: " + reason)));
}

void NcclWatchdog::throwIfBroken() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_) throw CommError("nccl communicator is broken: " + reason_);
}

bool NcclWatchdog::broken() {
  std::lock_guard<std::mutex> lock(mutex_);
  return broken_;
}

void NcclWatchdog::fail(const std::shared_ptr<NcclWork>& culprit, const std::string& cause) {
  std::vector<std::shared_ptr<NcclWork>> victims;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (broken_) {
      const std::string reason = reason_;
      lock.unlock();
      if (culprit) {
        culprit->abandon();
        culprit->finishFailed(std::make_exception_ptr(
            CommError("nccl " + culprit->label() + " failed: the communicator is broken: " + reason)));
      }
      return;
    }
    broken_ = true;
    reason_ = cause;  // until the diagnosis below is in
    victims.assign(outstanding_.begin(), outstanding_.end());
    outstanding_.clear();
    if (culprit && std::find(victims.begin(), victims.end(), culprit) == victims.end()) {
      victims.insert(victims.begin(), culprit);
    }
    // Before the abort: aborting makes the events fire, and an abandoned Work
    // must not be mistaken for a finished one.
    for (const auto& victim : victims) victim->abandon();
  }
  DTRAIN_LOG_ERROR("nccl: " << cause << "; aborting the communicator");
  // Abort first, diagnose second: the abort releases the GPU at once, the
  // diagnosis takes a few progress intervals.
  comm_.abort();
  std::string reason = cause;
  if (culprit && culprit->collective()) {
    const std::string diagnosis = progress_.diagnose(culprit->seq(), culprit->opName());
    if (!diagnosis.empty()) reason += "; " + diagnosis;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    reason_ = reason;
  }
  for (const auto& victim : victims) {
    const std::string message =
        victim == culprit ? reason : victim->label() + " was aborted because " + reason;
    victim->finishFailed(std::make_exception_ptr(CommError("nccl " + message)));
  }
}

void NcclWatchdog::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void NcclWatchdog::settleOutstanding(bool flushed, const std::string& reason) {
  std::deque<std::shared_ptr<NcclWork>> outstanding;
  bool broken;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    outstanding.swap(outstanding_);
    broken = broken_;
  }
  for (const auto& work : outstanding) {
    if (flushed && !broken && work->queryGpu(nullptr) == NcclWork::GpuState::kDone) {
      complete(work);
    } else {
      work->abandon();
      work->finishFailed(std::make_exception_ptr(CommError("nccl " + work->label() + " did not complete: " + reason)));
    }
  }
}

void NcclWatchdog::run() {
  const cudaError_t rc = cudaSetDevice(device_);
  if (rc != cudaSuccess) {
    DTRAIN_LOG_ERROR("nccl watchdog: cudaSetDevice(" << device_ << ") failed: " << cudaGetErrorString(rc));
  }
  // While the training thread captures a CUDA graph in the default (global)
  // mode, a query from any other thread in that mode would invalidate the
  // capture. The watchdog's queries touch no capturing stream, so relax them.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    lock.unlock();
    try {
      pollOnce();
    } catch (const std::exception& e) {
      // A watchdog that dies silently would turn every later hang into a
      // forever-hang; log and keep watching.
      DTRAIN_LOG_ERROR("nccl watchdog on " << where_ << ": " << e.what());
    }
    lock.lock();
    wake_.wait_for(lock, poll_interval_, [this] { return stop_; });
  }
}

void NcclWatchdog::pollOnce() {
  std::vector<std::shared_ptr<NcclWork>> finished;
  std::shared_ptr<NcclWork> culprit;
  std::string cause;
  bool any_outstanding = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_) return;
    while (!outstanding_.empty()) {
      const auto& front = outstanding_.front();
      std::string cuda_error;
      const NcclWork::GpuState state = front->queryGpu(&cuda_error);
      if (state == NcclWork::GpuState::kDone) {
        finished.push_back(front);
        outstanding_.pop_front();
        continue;
      }
      if (state == NcclWork::GpuState::kFailed) {
        culprit = front;
        cause = front->label() + " failed on the GPU on " + where_ + ": " + cuda_error;
      }
      break;
    }
    const auto now = NcclWork::Clock::now();
    for (const auto& work : outstanding_) {
      if (culprit) break;
      if (now >= work->deadline()) {
        culprit = work;
        cause = work->label() + " timed out after " + std::to_string(work->timeout().count()) + " ms on " +
                where_;
      }
    }
    any_outstanding = !outstanding_.empty();
  }
  for (const auto& work : finished) complete(work);
  if (!culprit && any_outstanding) {
    const ncclResult_t state = comm_.asyncError();
    if (state != ncclSuccess && state != ncclInProgress) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!outstanding_.empty()) {
        culprit = outstanding_.front();
        cause = culprit->label() + " failed on " + where_ + ": NCCL reported " +
                NcclCommHandle::describe(state, nullptr);
      }
    }
  }
  if (culprit) fail(culprit, cause);
}

void NcclWatchdog::complete(const std::shared_ptr<NcclWork>& work) {
  if (work->collective()) progress_.completed(work->seq());
  work->finishCompleted();
}

}  // namespace dtrain
