// NcclWork: the Work of one NCCL operation, completed by a CUDA event
// recorded on the communicator's stream right after the operation.
//
// Contract, on top of comm/work.h:
// - isCompleted() is true once the GPU finished the operation (the event is
//   done) or the operation failed. Never blocks.
// - wait(timeout) blocks the host until the GPU finished the operation,
//   polling the event with a short sleep so that its own timeout and a
//   failure recorded by the watchdog both end the wait; rethrows that failure.
// - The communicator's watchdog finishes the Work exactly once (completed, or
//   failed with a CommError); wait() may record a CUDA error it sees itself.
// - An abandoned Work (its communicator is being aborted) never reports
//   success, even though aborting makes its event fire: wait() keeps polling
//   until the watchdog records the failure.
// - A Work captured into a CUDA graph is complete once captured: nothing runs
//   until the graph is launched, and its event is never recorded.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <string>

#include "comm/nccl/cuda_resources.h"
#include "comm/types.h"
#include "comm/work.h"

namespace dtrain {

class NcclWork : public Work {
 public:
  using Clock = std::chrono::steady_clock;

  // Creates the completion event on the current CUDA device. `label` names
  // the operation in messages ("allreduce #42", "send to rank 3 (p2p #7)");
  // only collectives are reported to the progress tracker.
  NcclWork(std::string op_name, uint64_t seq, std::string label, bool collective, Milliseconds timeout);

  bool isCompleted() override;
  void wait(std::chrono::milliseconds timeout) override;

  const std::string& label() const { return label_; }
  bool collective() const { return collective_; }
  Milliseconds timeout() const { return timeout_; }
  Clock::time_point deadline() const { return deadline_; }
  cudaEvent_t completionEvent() const { return completion_.get(); }

  enum class GpuState { kRunning, kDone, kFailed };
  // Queries the completion event; on kFailed, `cuda_error` gets the CUDA
  // error's name and text.
  GpuState queryGpu(std::string* cuda_error);

  void abandon() { abandoned_.store(true); }
  // The operation was captured into a CUDA graph (see the contract above).
  void completeAsCaptured();
  // Each returns false when the Work was already finished.
  bool finishCompleted();
  bool finishFailed(std::exception_ptr error);

 private:
  std::string label_;
  bool collective_;
  Milliseconds timeout_;
  Clock::time_point deadline_;
  CudaEvent completion_;
  std::atomic<bool> abandoned_{false};
  std::atomic<bool> captured_{false};
  std::atomic<bool> finished_{false};
};

}  // namespace dtrain
