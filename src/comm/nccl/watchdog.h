// NcclWatchdog: the thread that finishes an NCCL communicator's Works and
// breaks the communicator when one of them cannot finish.
//
// Every few milliseconds it looks at the outstanding Works in enqueue order
// (they share one stream, so they finish in that order):
//   completion event done          -> Work completed, progress reported;
//   ncclCommGetAsyncError != ok    -> failure (a peer died, network error);
//   older than its own timeout     -> failure (a peer never arrived).
// A failure breaks the communicator (fail()): NCCL is aborted, every
// outstanding Work fails with a CommError naming its operation and sequence
// number, the culprit operation, NCCL's error if any, and the progress
// tracker's diagnosis of the ranks that never arrived; later calls fail at
// once with the same reason (throwIfBroken()).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/nccl/comm_handle.h"
#include "comm/nccl/work.h"

namespace dtrain {

class ProgressTracker;

class NcclWatchdog {
 public:
  // `comm` and `progress` must outlive the watchdog. `device` is made current
  // on the watchdog thread (an event query on a thread with no device would
  // create a context on GPU 0). `where` ("cuda:1") goes into messages.
  NcclWatchdog(NcclCommHandle& comm, ProgressTracker& progress, int device, std::string where,
               Milliseconds poll_interval);
  // Stops the thread (stop()); leaves outstanding Works as they are.
  ~NcclWatchdog();
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  // Hands an enqueued Work to the watchdog. If the communicator broke in the
  // meantime, the Work fails at once with the reason.
  void track(std::shared_ptr<NcclWork> work);

  // Throws CommError("nccl communicator is broken: <reason>") once broken.
  void throwIfBroken();
  bool broken();

  // Breaks the communicator because of `culprit` (which may not be tracked
  // yet, e.g. when its enqueue failed): see the header comment. `cause` says
  // what happened ("allreduce #42 timed out after 5000 ms on cuda:0"); NCCL's
  // error and the diagnosis are appended here. Only the first call acts; a
  // later one just fails its culprit with the first reason. May block for the
  // diagnosis (a few progress intervals); call without holding locks.
  void fail(const std::shared_ptr<NcclWork>& culprit, const std::string& cause);

  // Joins the thread. Idempotent.
  void stop();

  // After stop(): finishes the outstanding Works for the communicator's
  // destructor. When `flushed` (NCCL finalized cleanly) a Work whose event is
  // done completes; every other fails with CommError(`reason`).
  void settleOutstanding(bool flushed, const std::string& reason);

 private:
  void run();
  void pollOnce();
  void complete(const std::shared_ptr<NcclWork>& work);

  NcclCommHandle& comm_;
  ProgressTracker& progress_;
  const int device_;
  const std::string where_;
  const Milliseconds poll_interval_;

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;                                  // guarded by mutex_
  bool broken_ = false;                                // guarded by mutex_
  std::string reason_;                                 // guarded by mutex_
  std::deque<std::shared_ptr<NcclWork>> outstanding_;  // guarded by mutex_, enqueue order
  std::thread thread_;
};

}  // namespace dtrain
