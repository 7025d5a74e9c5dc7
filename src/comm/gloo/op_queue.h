// One worker thread that runs a communicator's operations one at a time, in
// the order they were submitted: collectives must run in the same order on
// every rank, and Gloo's context is not meant for concurrent collectives.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace dtrain {

class OpQueue {
 public:
  // The worker thread reports `error_rank` in errors and logs (see
  // setThreadRank), so a thread standing in for a rank is named correctly.
  explicit OpQueue(int error_rank);
  // Runs every operation still queued, then joins the worker.
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // `op` must not throw; it reports its own failure (in its Work).
  void push(std::function<void()> op);

 private:
  void runLoop(int error_rank);

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mutex_
  bool stopping_ = false;                    // guarded by mutex_
  std::thread worker_;
};

}  // namespace dtrain
