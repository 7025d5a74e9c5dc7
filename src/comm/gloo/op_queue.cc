#include "comm/gloo/op_queue.h"

#include "common/error.h"
#include "common/log.h"

namespace dtrain {

OpQueue::OpQueue(int error_rank) : worker_([this, error_rank] { runLoop(error_rank); }) {}

OpQueue::~OpQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void OpQueue::push(std::function<void()> op) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(op));
  }
  cv_.notify_one();
}

void OpQueue::runLoop(int error_rank) {
  setThreadRank(error_rank);
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued has run
    std::function<void()> op = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    try {
      op();
    } catch (const std::exception& e) {
      DTRAIN_LOG_ERROR("operation escaped its own error handling: " << e.what());
    }
    lock.lock();
  }
}

}  // namespace dtrain
