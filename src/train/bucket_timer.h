// BucketTimer: when each gradient bucket of a backward was ready and when
// its all-reduce ran, observed from DataParallel (a GradSyncObserver). The
// progress display's bucket table, the Chrome trace and the metrics' overlap
// ratio all read their bucket timings from here (private to train/).
//
// Contract:
// - Attach it with dp.setObserver(&timer); it records every synchronised
//   backward, replacing the previous one. On CUDA it records timing events
//   on the compute and communication streams (the host never waits while
//   recording); on the CPU it reads the host clock.
// - last() resolves the last backward: on CUDA it waits for that backward's
//   events, so call it at a log interval, not every step.
// - Do not leave it attached while a step is being captured into a CUDA
//   graph (TrainStep detaches every observer around a capture).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "dtrain/data_parallel.h"

namespace dtrain {

// Timings of one synchronised backward, in milliseconds since the first
// gradient of that backward was ready (or since a reference event).
struct BackwardTimeline {
  struct BucketTimes {
    double ready_ms = 0;  // its last gradient was accumulated
    double start_ms = 0;  // its all-reduce was started
    double end_ms = 0;    // its all-reduce finished
    int64_t bytes = 0;
  };
  std::vector<BucketTimes> buckets;  // in launch order
  double backward_end_ms = 0;        // the last gradient of the backward was ready
  // The host clock when the first gradient was ready (the zero of the times
  // above on the CPU; on CUDA the host saw it then, the GPU may be behind).
  std::chrono::steady_clock::time_point first_ready;
};

class BucketTimer : public GradSyncObserver {
 public:
  explicit BucketTimer(const DataParallel& dp);
  ~BucketTimer() override;
  BucketTimer(const BucketTimer&) = delete;
  BucketTimer& operator=(const BucketTimer&) = delete;

  // Backwards recorded so far.
  int64_t backwards() const { return backwards_; }
  // The last recorded backward. With `cuda_reference_event` (a cudaEvent_t
  // recorded with timing on this device), CUDA times are milliseconds since
  // that event instead of since the first gradient.
  BackwardTimeline last(void* cuda_reference_event = nullptr) const;

  void backwardStarted(void* stream) override;
  void bucketReady(int bucket, void* stream) override;
  void bucketLaunching(int bucket, void* stream) override;
  void bucketLaunched(int bucket, void* stream) override;
  void backwardEnded(void* stream) override;
  void bucketCompleted(int bucket) override;

 private:
  struct Events;
  double sinceFirst() const;

  std::vector<int64_t> bytes_;
  bool cuda_ = false;
  int64_t backwards_ = 0;
  std::chrono::steady_clock::time_point first_ready_;
  std::vector<double> ready_ms_, start_ms_, end_ms_;
  std::vector<char> ready_seen_;  // bucketReady() came in this backward
  double backward_end_ms_ = 0;
  std::unique_ptr<Events> events_;  // CUDA timing events
};

}  // namespace dtrain
