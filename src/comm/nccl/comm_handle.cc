#include "comm/nccl/comm_handle.h"

#include "comm/nccl/poll_backoff.h"

#include <algorithm>
#include <thread>

#include "comm/nccl/nccl_check.h"
#include "common/error.h"
#include "common/log.h"

namespace dtrain {
NcclCommHandle::NcclCommHandle(const ncclUniqueId& id, int rank, int size, const std::string& name,
                               Milliseconds timeout)
    : name_(name) {
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
    state = awaitNotInProgress(Clock::now() + timeout);
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
}

NcclCommHandle::~NcclCommHandle() { abort(); }

void NcclCommHandle::issue(const std::string& what, const std::function<ncclResult_t(ncclComm_t)>& call,
                           Clock::time_point deadline) {
  ncclResult_t rc;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!comm_) throw CommError(what + ": the NCCL communicator was aborted");
    rc = call(comm_);
  }
  if (rc == ncclInProgress) rc = awaitNotInProgress(deadline);
  if (rc == ncclInProgress) {
    throw CommError(what + " was still being enqueued by NCCL when its deadline passed "
                           "(a peer never connected?)");
  }
  if (rc != ncclSuccess) throw CommError(what + " failed: " + describe(rc, nullptr));
}

ncclResult_t NcclCommHandle::asyncError() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!comm_) return ncclSuccess;
  ncclResult_t state = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
  return rc != ncclSuccess ? rc : state;
}

void NcclCommHandle::abort() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!comm_) return;
  const ncclResult_t rc = ncclCommAbort(comm_);
  if (rc != ncclSuccess) {
    DTRAIN_LOG_WARN("ncclCommAbort of '" << name_ << "' returned " << describe(rc, nullptr));
  }
  comm_ = nullptr;
}

bool NcclCommHandle::finalizeAndDestroy(Milliseconds timeout) {
  try {
    ncclResult_t rc;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!comm_) return false;
      rc = ncclCommFinalize(comm_);
    }
    if (rc == ncclInProgress) rc = awaitNotInProgress(Clock::now() + timeout);
    if (rc == ncclSuccess) {
      std::lock_guard<std::mutex> lock(mutex_);
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
  std::lock_guard<std::mutex> lock(mutex_);
  return comm_ != nullptr;
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
      std::lock_guard<std::mutex> lock(mutex_);
      if (!comm_) throw CommError("the NCCL communicator was aborted");
      DTRAIN_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
    }
    if (state != ncclInProgress) return state;
    if (Clock::now() >= deadline) return ncclInProgress;
    backoff.pause();
  }
}

}  // namespace dtrain
