// Progress publication and stall diagnosis, shared by the Gloo and NCCL
// backends (the idea of Horovod's stall inspector).
//
// Each rank runs one ProgressTracker. A background thread publishes
// "<prefix>/progress/<rank>" = "<started> <completed> <heartbeat>" to the store
// every `interval` when something changed (and at least every 5 intervals as a
// heartbeat), never on the collective's critical path.
//
// When collective #seq fails or times out, diagnose(seq, op) reads every
// rank's record twice, `2 * interval` apart, and returns a sentence such as
//   "ranks 3, 5 never arrived at allreduce #42 (last started #41);
//    rank 5 stopped publishing progress (process dead or hung?)"
// or "" when every rank had started #seq and all are alive. It never throws:
// a store that is itself unreachable yields a sentence saying so.
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
  void publishOnce();

  std::shared_ptr<Store> store_;
  std::string prefix_;
  int rank_;
  int size_;
  Milliseconds interval_;
  std::atomic<uint64_t> started_{0};
  std::atomic<uint64_t> completed_{0};
  uint64_t heartbeat_ = 0;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dtrain
