// NcclCommHandle: one non-blocking ncclComm_t and the lock that keeps every
// NCCL call on it apart from its abort.
//
// Why a lock: the watchdog thread aborts the communicator while the caller's
// thread may be enqueuing on it; NCCL frees the communicator in
// ncclCommAbort, so an unguarded enqueue would touch freed memory. Every call
// takes the lock only for the NCCL call itself, never while sleeping.
//
// Why non-blocking (ncclConfig_t::blocking = 0): init and enqueue return
// ncclInProgress instead of blocking inside NCCL, so a hang (a peer that never
// arrives) is bounded by our deadline and can be aborted.
#pragma once

#include <nccl.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>

#include "comm/types.h"

namespace dtrain {

class NcclCommHandle {
 public:
  using Clock = std::chrono::steady_clock;

  // ncclCommInitRankConfig on the current CUDA device, then waits up to
  // `timeout` for the communicator to become ready. On timeout the
  // half-made communicator is aborted and TimeoutError names the wait; an
  // NCCL failure is a CommError with NCCL's message.
  NcclCommHandle(const ncclUniqueId& id, int rank, int size, const std::string& name,
                 Milliseconds timeout);
  // Aborts the communicator if neither abort() nor finalizeAndDestroy() ran.
  ~NcclCommHandle();
  NcclCommHandle(const NcclCommHandle&) = delete;
  NcclCommHandle& operator=(const NcclCommHandle&) = delete;

  // Runs `call` (one NCCL call, or a group of them ending in ncclGroupEnd) and
  // waits until NCCL has put the work on the stream: with a non-blocking
  // communicator NCCL may answer ncclInProgress, and nothing else may be
  // issued on the communicator until its state leaves that. `what` names the
  // call in errors. Throws CommError when the communicator is aborted, when
  // NCCL fails, or when `deadline` passes while the call is still in progress.
  void issue(const std::string& what, const std::function<ncclResult_t(ncclComm_t)>& call,
             Clock::time_point deadline);

  // The communicator's asynchronous state: ncclSuccess, ncclInProgress, or an
  // error (a peer died, a network failure). ncclSuccess once aborted.
  ncclResult_t asyncError();

  // ncclCommAbort: stops outstanding kernels and frees the communicator.
  // Idempotent; any thread.
  void abort();

  // Orderly shutdown: ncclCommFinalize (flushes outstanding work; in
  // progress until every rank finalized) then ncclCommDestroy. If the flush
  // does not finish within `timeout` or fails, aborts instead and returns
  // false. Never throws.
  bool finalizeAndDestroy(Milliseconds timeout);

  bool alive();

  // "ncclRemoteError (remote process exited or there was a network error):
  // <NCCL's last error>" — NCCL's words for a result code.
  static std::string describe(ncclResult_t result, ncclComm_t comm);

 private:
  // Polls the state while it is ncclInProgress; returns the final state, or
  // ncclInProgress when `deadline` passed first. Takes the lock per poll.
  ncclResult_t awaitNotInProgress(Clock::time_point deadline);

  std::string name_;  // NCCL may keep the config's commName pointer
  std::mutex mutex_;
  ncclComm_t comm_ = nullptr;  // guarded by mutex_; null once aborted/destroyed
};

}  // namespace dtrain
