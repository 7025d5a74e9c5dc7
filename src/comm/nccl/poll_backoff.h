// How the NCCL backend waits for the GPU or for NCCL's own enqueue thread.
//
// Non-blocking NCCL communicators return ncclInProgress from nearly every
// call while a background thread enqueues the kernel, and a collective is
// often done within tens of microseconds. A sleep of even 10 us costs ~60 us
// on Linux (timer slack), which capped the bench at ~7,500 ops/s; so the
// first `spin` of a wait only yields the core, and only a long wait backs off
// to sleeps growing to 1 ms, so it costs no CPU.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace dtrain {

class PollBackoff {
 public:
  explicit PollBackoff(std::chrono::microseconds spin = std::chrono::microseconds(2000))
      : spin_until_(std::chrono::steady_clock::now() + spin) {}

  // Call between two polls.
  void pause() {
    if (std::chrono::steady_clock::now() < spin_until_) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, std::chrono::microseconds(1000));
  }

 private:
  std::chrono::steady_clock::time_point spin_until_;
  std::chrono::microseconds sleep_{20};
};

}  // namespace dtrain
