#include "comm/work.h"

#include "common/error.h"

namespace dtrain {

bool Work::isCompleted() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

void Work::wait(std::chrono::milliseconds timeout) {
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, timeout, [this] { return completed_; })) {
      throw TimeoutError(op_name_ + " #" + std::to_string(seq_) + " did not complete within " +
                         std::to_string(timeout.count()) + " ms of waiting");
    }
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

std::exception_ptr Work::exception() {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void Work::markCompleted() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    completed_ = true;
  }
  cv_.notify_all();
}

void Work::markFailed(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::move(error);
    completed_ = true;
  }
  cv_.notify_all();
}

}  // namespace dtrain
