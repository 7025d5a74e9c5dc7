#include "train/bucket_timer.h"

#if DTRAIN_TORCH_CUDA
#include <cuda_runtime_api.h>

#include "gpu/cuda_check.h"
#endif

namespace dtrain {

struct BucketTimer::Events {
#if DTRAIN_TORCH_CUDA
  std::vector<cudaEvent_t> ready, start, end;
  cudaEvent_t first = nullptr, backward_end = nullptr;

  static cudaEvent_t make() {
    cudaEvent_t event = nullptr;
    DTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDefault));
    return event;
  }
  explicit Events(size_t buckets) {
    for (size_t b = 0; b < buckets; ++b) {
      ready.push_back(make());
      start.push_back(make());
      end.push_back(make());
    }
    first = make();
    backward_end = make();
  }
  ~Events() {
    for (auto* list : {&ready, &start, &end}) {
      for (cudaEvent_t e : *list) cudaEventDestroy(e);
    }
    cudaEventDestroy(first);
    cudaEventDestroy(backward_end);
  }
  static void record(cudaEvent_t event, void* stream) {
    DTRAIN_CUDA_CHECK(cudaEventRecord(event, static_cast<cudaStream_t>(stream)));
  }
  static double elapsed(cudaEvent_t from, cudaEvent_t to) {
    float ms = 0;
    DTRAIN_CUDA_CHECK(cudaEventSynchronize(to));
    DTRAIN_CUDA_CHECK(cudaEventElapsedTime(&ms, from, to));
    return ms;
  }
#else
  explicit Events(size_t) {}
#endif
};

BucketTimer::BucketTimer(const DataParallel& dp) {
  const size_t buckets = dp.buckets().size();
  for (size_t b = 0; b < buckets; ++b) bytes_.push_back(dp.bucketBytes(static_cast<int>(b)));
  ready_ms_.assign(buckets, 0);
  ready_seen_.assign(buckets, 0);
  start_ms_.assign(buckets, 0);
  end_ms_.assign(buckets, 0);
  cuda_ = dp.parameters().front().is_cuda();
  if (cuda_) events_ = std::make_unique<Events>(buckets);
}

BucketTimer::~BucketTimer() = default;

double BucketTimer::sinceFirst() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - first_ready_).count();
}

void BucketTimer::backwardStarted(void* stream) {
  first_ready_ = std::chrono::steady_clock::now();
  ++backwards_;
  std::fill(ready_seen_.begin(), ready_seen_.end(), 0);
#if DTRAIN_TORCH_CUDA
  if (cuda_) Events::record(events_->first, stream);
#else
  (void)stream;
#endif
}

void BucketTimer::bucketReady(int bucket, void* stream) {
  ready_seen_[static_cast<size_t>(bucket)] = 1;
  ready_ms_[static_cast<size_t>(bucket)] = sinceFirst();
#if DTRAIN_TORCH_CUDA
  if (cuda_) Events::record(events_->ready[static_cast<size_t>(bucket)], stream);
#else
  (void)stream;
#endif
}

void BucketTimer::bucketLaunching(int bucket, void* stream) {
  const auto b = static_cast<size_t>(bucket);
  start_ms_[b] = sinceFirst();
  // A bucket launched at the end of backward (some of its parameters got no
  // gradient) counts as ready when it starts.
  const bool late = !ready_seen_[b];
  if (late) ready_ms_[b] = start_ms_[b];
#if DTRAIN_TORCH_CUDA
  if (cuda_) {
    if (late) Events::record(events_->ready[b], stream);
    Events::record(events_->start[b], stream);
  }
#else
  (void)stream;
#endif
}

void BucketTimer::bucketLaunched(int bucket, void* stream) {
#if DTRAIN_TORCH_CUDA
  if (cuda_) Events::record(events_->end[static_cast<size_t>(bucket)], stream);
#else
  (void)bucket, (void)stream;
#endif
}

void BucketTimer::backwardEnded(void* stream) {
  backward_end_ms_ = sinceFirst();
#if DTRAIN_TORCH_CUDA
  if (cuda_) Events::record(events_->backward_end, stream);
#else
  (void)stream;
#endif
}

void BucketTimer::bucketCompleted(int bucket) { end_ms_[static_cast<size_t>(bucket)] = sinceFirst(); }

BackwardTimeline BucketTimer::last(void* cuda_reference_event) const {
  BackwardTimeline timeline;
  timeline.first_ready = first_ready_;
  timeline.backward_end_ms = backward_end_ms_;
  for (size_t b = 0; b < bytes_.size(); ++b) {
    timeline.buckets.push_back({ready_ms_[b], start_ms_[b], end_ms_[b], bytes_[b]});
  }
#if DTRAIN_TORCH_CUDA
  if (cuda_ && backwards_ > 0) {
    const cudaEvent_t zero =
        cuda_reference_event != nullptr ? static_cast<cudaEvent_t>(cuda_reference_event) : events_->first;
    for (size_t b = 0; b < bytes_.size(); ++b) {
      auto& times = timeline.buckets[b];
      times.ready_ms = Events::elapsed(zero, events_->ready[b]);
      times.start_ms = Events::elapsed(zero, events_->start[b]);
      times.end_ms = Events::elapsed(zero, events_->end[b]);
    }
    timeline.backward_end_ms = Events::elapsed(zero, events_->backward_end);
  }
#else
  (void)cuda_reference_event;
#endif
  return timeline;
}

}  // namespace dtrain
