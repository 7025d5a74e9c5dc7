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
// `interval` for silenceWindow(interval) — 2 * kHeartbeatIntervals intervals,
// and never less than kMinSilenceWindow, since a live rank's publisher can be
// starved of CPU for a while on a loaded host — returning early once every
// rank has published again, and returns a sentence such as
//   "ranks 3, 4 never arrived at allreduce #42 (last started #41);
//    rank 5 stopped publishing progress (process dead or hung?)"
// or "" when every rank had started #seq and all are alive. A rank that
// stopped publishing is not also listed as never arrived (its record is
// stale). The destructor leaves a final record marked "closed", reported as
// "rank 5 closed its communicator (exited or destroyed it)" instead of dead.
// diagnose() never throws: a store that is itself unreachable yields a
// sentence saying so.
//
// Where each rank runs: a tracker given its host and address puts them in
// its record ("<started> <completed> <heartbeat> <host> <address>"), and the
// diagnosis names them ("rank 1 on node1 (10.0.0.2) stopped publishing
// progress ..."). Rank 0's publisher gathers every rank's host and address
// once all have published and stores them as one roster key, which every
// publisher reads once and keeps: a rank that can no longer reach the store
// (its host cut off by a partition) still names the ranks on other hosts
// it lost.
//
// Deadlines: diagnose() answers within kDiagnosisBudget + a few intervals
// whatever the store does (a StoreDeadlineScope bounds its requests, so it
// never waits behind a publisher blocked on an unreachable store), and
// publishing is bounded the same way, so the destructor returns promptly.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/types.h"

namespace dtrain {

class Store;

class ProgressTracker {
 public:
  static constexpr int kHeartbeatIntervals = 3;
  // Bound on the store requests of one diagnosis, and of one publication.
  static constexpr Milliseconds kDiagnosisBudget{2000};
  static constexpr Milliseconds kPublishBudget{2000};
  // The shortest silence that makes a rank "stopped publishing".
  static constexpr Milliseconds kMinSilenceWindow{1500};
  static Milliseconds silenceWindow(Milliseconds interval);

  // `host` and `address` (no spaces; "" when unknown) say where this rank runs.
  ProgressTracker(std::shared_ptr<Store> store, std::string prefix, int rank, int size,
                  Milliseconds interval, std::string host = "", std::string address = "");
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
  // Rank 0 stores the roster once every rank has published; the others
  // read it once. Publisher thread only; failures are retried next turn.
  void shareRoster();
  std::string keyFor(int rank) const;
  std::string rosterKey() const;
  // " on node1 (10.0.0.2)" for a rank: where its record (host, address)
  // or else the roster says; "" when neither knows.
  std::string placeOf(int rank, const std::string& host, const std::string& address) const;

  std::shared_ptr<Store> store_;
  std::string prefix_;
  int rank_;
  int size_;
  Milliseconds interval_;
  std::string host_;
  std::string address_;
  std::atomic<uint64_t> started_{0};
  std::atomic<uint64_t> completed_{0};
  uint64_t heartbeat_ = 0;       // publisher thread only (and the constructor)
  bool publish_failing_ = false;  // publisher thread only: log a failure streak once
  // rank -> "host address", from the roster; guarded by roster_mutex_.
  mutable std::mutex roster_mutex_;
  std::vector<std::pair<std::string, std::string>> roster_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dtrain
