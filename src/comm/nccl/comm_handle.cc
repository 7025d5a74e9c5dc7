#include "comm/nccl/comm_handle.h"

#include "comm/nccl/poll_backoff.h"

#include <algorithm>
#include <condition_variable>
#include <thread>

#include "comm/nccl/nccl_check.h"
#include "common/error.h"
#include "common/log.h"

namespace dtrain {
NcclCommHandle::NcclCommHandle(const ncclUniqueId& id, int rank, int size, const std::string& name,
                               Milliseconds timeout, bool blocking)
    : name_(name) {
  const auto deadline = Clock::now() + timeout;
  const std::string who = "rank " + std::to_string(rank) + " of " + std::to_string(size);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = name_.c_str();
  ncclComm_t comm = nullptr;
  // NCCL reads its (const) id argument by value; copy to satisfy the signature.
  ncclUniqueId id_copy = id;
  const ncclResult_t rc = ncclCommInitRankConfig(&comm, size, id_copy, rank, &config);
  comm_ = comm;
  if (rc != ncclSuccess && rc != ncclInProgress) {
    const std::string reason = describe(rc, comm);
    abort();
    throw CommError("ncclCommInitRankConfig (" + who + ") failed: " + reason);
  }
  ncclResult_t state = ncclInProgress;
  try {
    state = awaitNotInProgress(deadline);
  } catch (...) {
    abort();
    throw;
  }
  if (state == ncclInProgress) {
    abort();
    throw TimeoutError("NCCL communicator '" + name_ + "' (" + who + ") was not ready within " +
                       std::to_string(timeout.count()) +
                       " ms: a rank never joined, or the ranks cannot reach each other "
                       "(check NCCL_SOCKET_IFNAME and NCCL_DEBUG=WARN output)");
  }
  if (state != ncclSuccess) {
    const std::string reason = describe(state, nullptr);
    abort();
    throw CommError("NCCL communicator '" + name_ + "' (" + who + ") failed to initialize: " + reason);
  }
  if (!blocking || !blockingSupported()) return;
  try {
    splitIntoBlocking(rank, who, deadline);
  } catch (...) {
    abort();
    throw;
  }
}

NcclCommHandle::~NcclCommHandle() { abort(); }

void NcclCommHandle::issue(const std::string& what, const std::function<ncclResult_t(ncclComm_t)>& call,
                           Clock::time_point deadline) {
  ncclResult_t rc;
  {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    if (!comm_) throw CommError(what + ": the NCCL communicator was aborted");
    calls_in_nccl_.fetch_add(1);
    rc = call(comm_);
    calls_in_nccl_.fetch_sub(1);
  }
  if (rc == ncclInProgress) rc = awaitNotInProgress(deadline);
  if (rc == ncclInProgress) {
    throw CommError(what + " was still being enqueued by NCCL when its deadline passed "
                           "(a peer never connected?)");
  }
  if (rc != ncclSuccess) {
    if (!alive()) throw CommError(what + ": the NCCL communicator was aborted while the call was in NCCL");
    throw CommError(what + " failed: " + describe(rc, nullptr));
  }
}

ncclResult_t NcclCommHandle::asyncError() {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  if (!comm_) return ncclSuccess;
  ncclResult_t state = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
  return rc != ncclSuccess ? rc : state;
}

bool NcclCommHandle::blockingSupported() {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  return true;
#else
  return false;
#endif
}

void NcclCommHandle::revokeLocked(ncclComm_t comm) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  const ncclResult_t rc = ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    DTRAIN_LOG_WARN("ncclCommRevoke of '" << name_ << "' returned " << describe(rc, nullptr));
  }
#else
  (void)comm;
#endif
}

void NcclCommHandle::abort() {
  std::lock_guard<std::mutex> abort_lock(abort_mutex_);
  if (!comm_) return;
  // A call blocked inside NCCL holds mutex_ shared until NCCL lets it go:
  // revoke first, which stops in-flight work and makes it return.
  if (blocking_ && calls_in_nccl_.load() > 0) revokeLocked(comm_);
  std::unique_lock<std::shared_mutex> lock(mutex_);
  const ncclResult_t rc = ncclCommAbort(comm_);
  if (rc != ncclSuccess) {
    DTRAIN_LOG_WARN("ncclCommAbort of '" << name_ << "' returned " << describe(rc, nullptr));
  }
  comm_ = nullptr;
}

bool NcclCommHandle::finalizeAndDestroy(Milliseconds timeout) {
  try {
    std::unique_lock<std::mutex> abort_lock(abort_mutex_);
    if (!comm_) return false;
    ncclResult_t rc;
    if (blocking_) {
      // A blocking finalize waits inside NCCL for the other ranks: a timer
      // revokes the communicator if they do not come, so that it returns.
      std::mutex timer_mutex;
      std::condition_variable timer_cv;
      bool finalized = false;
      std::thread timer([&] {
        std::unique_lock<std::mutex> timer_lock(timer_mutex);
        if (!timer_cv.wait_for(timer_lock, timeout, [&] { return finalized; })) revokeLocked(comm_);
      });
      {
        std::shared_lock<std::shared_mutex> lock(mutex_);
        rc = ncclCommFinalize(comm_);
      }
      {
        std::lock_guard<std::mutex> timer_lock(timer_mutex);
        finalized = true;
      }
      timer_cv.notify_all();
      timer.join();
    } else {
      {
        std::shared_lock<std::shared_mutex> lock(mutex_);
        rc = ncclCommFinalize(comm_);
      }
      if (rc == ncclInProgress) rc = awaitNotInProgress(Clock::now() + timeout);
    }
    if (rc == ncclSuccess) {
      std::unique_lock<std::shared_mutex> lock(mutex_);
      const ncclResult_t destroyed = ncclCommDestroy(comm_);
      comm_ = nullptr;
      if (destroyed != ncclSuccess) {
        DTRAIN_LOG_WARN("ncclCommDestroy of '" << name_ << "' returned " << describe(destroyed, nullptr));
      }
      return true;
    }
    DTRAIN_LOG_WARN("NCCL communicator '" << name_ << "' did not finalize within " << timeout.count()
                                          << " ms (" << describe(rc, nullptr) << "); aborting it");
  } catch (const std::exception& e) {
    DTRAIN_LOG_WARN("finalizing NCCL communicator '" << name_ << "' failed: " << e.what()
                                                     << "; aborting it");
  }
  abort();
  return false;
}

bool NcclCommHandle::alive() {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  return comm_ != nullptr;
}

void NcclCommHandle::splitIntoBlocking(int rank, const std::string& who, Clock::time_point deadline) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  config.commName = name_.c_str();
  config.splitShare = 0;  // its own resources: the parent is finalized below
  ncclComm_t child = nullptr;
  ncclResult_t rc;
  {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    rc = ncclCommSplit(comm_, 0, rank, &child, &config);
  }
  // The parent is non-blocking, so the split is too: NCCL answers at once
  // (ncclSuccess or ncclInProgress) and makes the child on its own thread,
  // storing it into `child` when done. Wait for that, then for the child's
  // own state (aborting the parent stops the child's init).
  const std::atomic_ref<ncclComm_t> made(child);
  PollBackoff backoff;
  while (rc == ncclSuccess || rc == ncclInProgress) {
    if (made.load(std::memory_order_acquire) != nullptr) break;
    rc = asyncError();
    if (rc != ncclSuccess && rc != ncclInProgress) break;
    if (Clock::now() >= deadline) {
      rc = ncclInProgress;
      break;
    }
    backoff.pause();
  }
  if (rc == ncclSuccess || rc == ncclInProgress) {
    child = made.load(std::memory_order_acquire);
    while (child != nullptr) {
      ncclResult_t state = ncclSuccess;
      rc = ncclCommGetAsyncError(child, &state);
      if (rc == ncclSuccess) rc = state;
      if (rc != ncclInProgress || Clock::now() >= deadline) break;
      backoff.pause();
    }
    if (child == nullptr) rc = ncclInProgress;
  }
  if (rc == ncclInProgress) {
    if (child != nullptr) ncclCommAbort(child);
    throw TimeoutError("NCCL communicator '" + name_ + "' (" + who +
                       ") was not split into a blocking communicator before the initialisation deadline "
                       "(a rank stopped during start-up?)");
  }
  if (rc != ncclSuccess) {
    const std::string reason = describe(rc, child);
    if (child != nullptr) ncclCommAbort(child);
    throw CommError("ncclCommSplit of NCCL communicator '" + name_ + "' (" + who +
                    ") into a blocking communicator failed: " + reason);
  }
  // The parent has done its work: finalize it (bounded), keep the child.
  ncclComm_t parent = comm_;
  {
    std::lock_guard<std::mutex> abort_lock(abort_mutex_);
    std::unique_lock<std::shared_mutex> lock(mutex_);
    comm_ = child;
    blocking_ = true;
  }
  const auto parent_state = [parent] {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t got = ncclCommGetAsyncError(parent, &state);
    return got != ncclSuccess ? got : state;
  };
  ncclResult_t finalized = ncclCommFinalize(parent);
  while (finalized == ncclInProgress && Clock::now() < deadline) {
    backoff.pause();
    finalized = parent_state();
  }
  if (finalized == ncclSuccess) {
    const ncclResult_t destroyed = ncclCommDestroy(parent);
    if (destroyed != ncclSuccess) {
      DTRAIN_LOG_WARN("ncclCommDestroy of the non-blocking parent of '" << name_ << "' returned "
                                                                        << describe(destroyed, nullptr));
    }
    return;
  }
  DTRAIN_LOG_WARN("the non-blocking parent of NCCL communicator '"
                  << name_ << "' did not finalize (" << describe(finalized, nullptr) << "); aborting it");
  ncclCommAbort(parent);
}

std::string NcclCommHandle::describe(ncclResult_t result, ncclComm_t comm) {
  std::string text = ncclGetErrorString(result);
  if (result == ncclInProgress) return text;
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += ": " + std::string(last);
  return text;
}

ncclResult_t NcclCommHandle::awaitNotInProgress(Clock::time_point deadline) {
  PollBackoff backoff;
  while (true) {
    ncclResult_t state = ncclSuccess;
    {
      std::shared_lock<std::shared_mutex> lock(mutex_);
      if (!comm_) throw CommError("the NCCL communicator was aborted");
      DTRAIN_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
    }
    if (state != ncclInProgress) return state;
    if (Clock::now() >= deadline) return ncclInProgress;
    backoff.pause();
  }
}

}  // namespace dtrain
