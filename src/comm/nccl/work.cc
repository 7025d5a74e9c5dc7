#include "comm/nccl/work.h"

#include "comm/nccl/poll_backoff.h"

#include <algorithm>
#include <thread>

#include "common/error.h"

namespace dtrain {
namespace {

}  // namespace

NcclWork::NcclWork(std::string op_name, uint64_t seq, std::string label, bool collective,
                   Milliseconds timeout)
    : Work(std::move(op_name), seq),
      label_(std::move(label)),
      collective_(collective),
      timeout_(timeout),
      deadline_(Clock::now() + timeout) {}

NcclWork::GpuState NcclWork::queryGpu(std::string* cuda_error) {
  const cudaError_t rc = cudaEventQuery(completion_.get());
  if (rc == cudaSuccess) return GpuState::kDone;
  if (rc == cudaErrorNotReady) return GpuState::kRunning;
  if (cuda_error != nullptr) {
    *cuda_error = std::string(cudaGetErrorName(rc)) + " (" + cudaGetErrorString(rc) + ")";
  }
  return GpuState::kFailed;
}

bool NcclWork::isCompleted() {
  if (captured_.load()) return true;
  // Query before reading the failure: an abort makes the event fire, and the
  // failure is recorded before the abort, so this order never mistakes an
  // aborted operation for a finished one.
  const GpuState gpu = queryGpu(nullptr);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) return true;
  }
  return gpu == GpuState::kDone && !abandoned_.load();
}

void NcclWork::wait(std::chrono::milliseconds timeout) {
  if (captured_.load()) return;
  const auto give_up = Clock::now() + timeout;
  PollBackoff backoff;
  while (true) {
    std::string cuda_error;
    const GpuState gpu = queryGpu(&cuda_error);
    std::exception_ptr error = exception();
    if (error) std::rethrow_exception(error);
    if (gpu == GpuState::kDone && !abandoned_.load()) return;
    if (gpu == GpuState::kFailed) {
      // CUDA may report an asynchronous error only once; record it here so it
      // is not lost if the watchdog's own query misses it.
      finishFailed(std::make_exception_ptr(
          CommError("nccl " + label_ + " failed on the GPU: cudaEventQuery: " + cuda_error)));
      if (std::exception_ptr recorded = exception()) std::rethrow_exception(recorded);
      return;  // the watchdog had already seen it complete
    }
    if (Clock::now() >= give_up) {
      throw TimeoutError("nccl " + label_ + " did not complete within " + std::to_string(timeout.count()) +
                         " ms of waiting (it stays outstanding; the communicator enforces its own " +
                         std::to_string(timeout_.count()) + " ms timeout)");
    }
    backoff.pause();
  }
}

void NcclWork::completeAsCaptured() {
  captured_.store(true);
  finishCompleted();
}

bool NcclWork::finishCompleted() {
  if (finished_.exchange(true)) return false;
  markCompleted();
  return true;
}

bool NcclWork::finishFailed(std::exception_ptr error) {
  if (finished_.exchange(true)) return false;
  markFailed(std::move(error));
  return true;
}

}  // namespace dtrain
