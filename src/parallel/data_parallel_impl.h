// DataParallel's private state, shared by data_parallel.cc (hooks,
// replicated all-reduce) and data_parallel_shards.cc (ZeRO-2 and ZeRO-3).
#pragma once

#include <torch/csrc/autograd/function.h>

#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "comm/work.h"
#include "dtrain/data_parallel.h"
#include "parallel/unit_gather.h"

#if DTRAIN_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "gpu/cuda_check.h"
#endif

namespace dtrain {

struct DataParallel::Impl {
  DataParallel* owner = nullptr;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;  // kept alive: params hold them weakly
  std::vector<int> initial_pending;
  std::vector<int> pending;
  std::vector<char> ready;
  int next_bucket = 0;
  bool in_backward = false;
  std::vector<std::shared_ptr<Work>> works;  // this backward's all-reduces, in launch order
  std::vector<std::shared_ptr<Work>> previous_works;

  // ZeRO-2: staging buffers (bytes, each of the largest bucket's size) in
  // which a bucket's gradients gather until its reduce-scatter, and which
  // bucket holds which. Free slots are reused oldest release first (on
  // CUDA: the reduce-scatter that used it had the most time to finish).
  std::vector<torch::Tensor> pool;
  std::deque<int> free_slots;
  std::vector<int> slot_of_bucket;   // -1: none
  std::vector<torch::Tensor> staging;  // per bucket: its view of its slot
  struct InFlight {
    int bucket;
    std::shared_ptr<Work> work;
  };
  // CPU: reduce-scattered buckets whose part is not yet in the shard.
  std::deque<InFlight> in_flight;

  bool cuda = false;
  int device_index = 0;
  // ZeRO-3: the gathering of the units' parameters (the model's hooks);
  // otherwise, for a model with units, the hook that starts backward.
  std::shared_ptr<UnitGather> gather;
  std::shared_ptr<BackwardStart> backward_start;
  models::UnitHooks* hooks() const {
    return gather ? static_cast<models::UnitHooks*>(gather.get()) : backward_start.get();
  }
#if DTRAIN_TORCH_CUDA
  std::optional<c10::cuda::CUDAStream> comm_stream;
  std::optional<c10::cuda::CUDAStream> compute;  // compute_stream as a torch stream
  // ZeRO-2: per slot, recorded on the communication stream once its bucket
  // was added into the shard; the compute stream waits on it before reuse
  // within the same backward (an earlier backward's were joined at its
  // end, and a captured step must not wait on an event from outside it).
  std::vector<cudaEvent_t> released_events;
  std::vector<char> released_in_backward;
  // The communication stream waits on ready_events[b] before bucket b's
  // all-reduce, and the compute stream on joined_event after the last.
  std::vector<cudaEvent_t> ready_events;
  cudaEvent_t joined_event = nullptr;

  static cudaEvent_t makeEvent() {
    cudaEvent_t event = nullptr;
    DTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    return event;
  }
#endif
  // The stream backward runs this backward's gradient kernels on: the
  // current stream of the first gradient hook (autograd runs a node on its
  // forward's stream). Final callbacks may run with another current stream,
  // so the join at the end of backward uses this one (it must be the
  // capturing stream when the step is captured into a CUDA graph).
  void* compute_stream = nullptr;
  void* commStream() const {
#if DTRAIN_TORCH_CUDA
    if (cuda) return comm_stream->stream();
#endif
    return nullptr;
  }

  ~Impl() {
#if DTRAIN_TORCH_CUDA
    for (cudaEvent_t e : ready_events) cudaEventDestroy(e);
    for (cudaEvent_t e : released_events) cudaEventDestroy(e);
    if (joined_event != nullptr) cudaEventDestroy(joined_event);
#endif
  }
};

}  // namespace dtrain
