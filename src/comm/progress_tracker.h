// Progress publication and stall diagnosis, shared by the Gloo and NCCL
// backends (the idea of Horovod's stall inspector).
//
// Each rank runs one ProgressTracker. A background thread publishes
// "<prefix>/progress/<rank>" (or "progress/<rank>" for an empty prefix) =
// "<started> <completed> <heartbeat>" to the store every `interval` when
// something changed, and at least every kHeartbeatIntervals intervals as a
// heartbeat, never on the collective's critical path: started() and
// completed() only store an atomic.
//
// When collective #seq fails or times out, diagnose(seq, op) reads every
// rank's record, then re-reads the records that have not changed every
// `interval` for up to 2 * kHeartbeatIntervals intervals (returning early once
// every rank has published again), and returns a sentence such as
//   "ranks 3, 4 never arrived at allreduce #42 (last started #41);
//    rank 5 stopped publishing progress (process dead or hung?)"
// or "" when every rank had started #seq and all are alive. A rank that
// stopped publishing is not also listed as never arrived (its record is
// stale). The destructor leaves a final record marked "closed", reported as
// "rank 5 closed its communicator (exited or destroyed it)" instead of dead.
// diagnose() never throws: a store that is itself unreachable yields a
// sentence saying so.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/types.h"

namespace dtrain {

class Store;

class ProgressTracker {
 public:
  static constexpr int kHeartbeatIntervals = 3;

  ProgressTracker(std::shared_ptr<Store> store, std::string prefix, int rank, int size,
                  Milliseconds interval);
  ~ProgressTracker();
  ProgressTracker(const ProgressTracker&) = delete;
  ProgressTracker& operator=(const ProgressTracker&) = delete;

  void started(uint64_t seq);
  void completed(uint64_t seq);
  std::string diagnose(uint64_t seq, const std::string& op);

 private:
  void publishLoop();
  // Writes the current record (marked "closed" by the destructor); store
  // failures are logged, never thrown.
  void publishOnce(bool closing = false);
  std::string keyFor(int rank) const;

  std::shared_ptr<Store> store_;
  std::string prefix_;
  int rank_;
  int size_;
  Milliseconds interval_;
  std::atomic<uint64_t> started_{0};
  std::atomic<uint64_t> completed_{0};
  uint64_t heartbeat_ = 0;       // publisher thread only (and the constructor)
  bool publish_failing_ = false;  // publisher thread only: log a failure streak once
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dtrain
