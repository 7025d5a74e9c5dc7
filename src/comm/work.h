// The result of an asynchronous collective.
//
// Contract (as c10d's Work):
// - isCompleted() never blocks; true once the operation finished, successfully
//   or not.
// - wait(timeout) blocks until completion; rethrows the stored exception if
//   the operation failed; throws TimeoutError naming the operation if it did
//   not complete within `timeout` (the operation itself keeps its own
//   options.timeout, enforced by the backend). For CUDA work, completion means
//   the work is enqueued and the caller's stream is ordered after it, and
//   wait() blocks the host until the GPU finished it.
// - exception() returns the stored failure, or nullptr.
// - A Work may be waited on from any thread, any number of times.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>

namespace dtrain {

class Work {
 public:
  Work(std::string op_name, uint64_t seq) : op_name_(std::move(op_name)), seq_(seq) {}
  virtual ~Work() = default;

  virtual bool isCompleted();
  virtual void wait(std::chrono::milliseconds timeout);
  std::exception_ptr exception();

  const std::string& opName() const { return op_name_; }
  // The per-communicator sequence number of this collective (1-based).
  uint64_t seq() const { return seq_; }

  // Backends call exactly one of these once.
  void markCompleted();
  void markFailed(std::exception_ptr error);

 protected:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool completed_ = false;
  std::exception_ptr error_;

 private:
  std::string op_name_;
  uint64_t seq_;
};

}  // namespace dtrain
