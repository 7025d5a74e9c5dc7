// NcclCommHandle: one ncclComm_t, the way it is made, and the locks that
// keep every NCCL call on it apart from its abort.
//
// How it is made: ncclCommInitRankConfig with ncclConfig_t::blocking = 0, so
// that a group that never forms (a peer that never arrives) is bounded by our
// deadline and can be aborted. A non-blocking communicator costs every
// collective a thread, though: NCCL starts one per ncclGroupEnd to enqueue the
// work and answers ncclInProgress, ~50-90 us per call on an H100, which is the
// whole cost of a small all-reduce. So by default (DTRAIN_NCCL_BLOCKING=1,
// NCCL 2.28 or newer) the initialised communicator is split, still under the
// deadline, into a blocking one with the same ranks; the non-blocking parent
// is then finalized and the collectives run on the child, enqueued inline.
//
// Why locks: the watchdog thread aborts the communicator while the caller's
// thread may be enqueuing on it; NCCL frees the communicator in
// ncclCommAbort, so an unguarded enqueue would touch freed memory. NCCL calls
// hold mutex_ shared, the abort holds it exclusively. A blocking call can wait
// inside NCCL for a peer (connections are set up at a collective's first
// use); the abort then first revokes the communicator (ncclCommRevoke), which
// stops in-flight work and makes that call return, and frees it after.
#pragma once

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "comm/types.h"

namespace dtrain {

class NcclCommHandle {
 public:
  using Clock = std::chrono::steady_clock;

  // ncclCommInitRankConfig on the current CUDA device, then waits up to
  // `timeout` for the communicator to become ready; with `blocking` (and an
  // NCCL that can revoke) splits it into a blocking one within the same
  // `timeout`. On timeout the half-made communicator is aborted and
  // TimeoutError names the wait; an NCCL failure is a CommError with NCCL's
  // message.
  NcclCommHandle(const ncclUniqueId& id, int rank, int size, const std::string& name,
                 Milliseconds timeout, bool blocking = true);
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

  // Whether collectives run on a blocking communicator (see the top).
  bool blocking() const { return blocking_; }
  // Whether this build's NCCL can make one (ncclCommRevoke: 2.28 or newer).
  static bool blockingSupported();

  // "ncclRemoteError (remote process exited or there was a network error):
  // <NCCL's last error>" — NCCL's words for a result code.
  static std::string describe(ncclResult_t result, ncclComm_t comm);

 private:
  // Polls the state while it is ncclInProgress; returns the final state, or
  // ncclInProgress when `deadline` passed first. Takes the lock per poll.
  ncclResult_t awaitNotInProgress(Clock::time_point deadline);
  // Splits the (non-blocking, ready) communicator into a blocking one and
  // finalizes the parent; throws on failure or when `deadline` passes.
  void splitIntoBlocking(int rank, const std::string& who, Clock::time_point deadline);
  // ncclCommRevoke where supported: stops in-flight work so that a call
  // blocked inside NCCL returns. Caller holds abort_mutex_.
  void revokeLocked(ncclComm_t comm);

  std::string name_;  // NCCL may keep the config's commName pointer
  bool blocking_ = false;
  std::mutex abort_mutex_;   // one abort/teardown at a time; held by every writer of comm_
  std::shared_mutex mutex_;  // shared: an NCCL call on comm_; exclusive: freeing it
  std::atomic<int> calls_in_nccl_{0};  // issue() calls inside NCCL now
  ncclComm_t comm_ = nullptr;          // written under abort_mutex_ and mutex_ held exclusively; null once gone
};

}  // namespace dtrain
