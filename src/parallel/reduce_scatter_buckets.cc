#include "parallel/reduce_scatter_buckets.h"

#include <algorithm>
#include <optional>

#include "comm/communicator.h"
#include "common/error.h"
#include "parallel/bucket_plan.h"
#include "parallel/tensor_buffer.h"

#if DTRAIN_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include "gpu/cuda_check.h"
#endif

namespace dtrain {

// The compute stream waits on a slot's event before reusing it within the
// same backward (an earlier backward's were joined at its end, and a
// captured step must not wait on an event from outside it).
struct ReduceScatterBuckets::SlotEvents {
#if DTRAIN_TORCH_CUDA
  std::vector<cudaEvent_t> released;
  std::vector<char> released_in_backward;
  ~SlotEvents() {
    for (cudaEvent_t e : released) cudaEventDestroy(e);
  }
#endif
};

ReduceScatterBuckets::ReduceScatterBuckets(torch::ScalarType reduce_dtype)
    : reduce_dtype_(reduce_dtype), events_(std::make_unique<SlotEvents>()) {
  if (reduce_dtype != torch::kFloat && reduce_dtype != torch::kBFloat16) {
    throw ConfigError(std::string("DataParallel: reduce_dtype ") + c10::toString(reduce_dtype) +
                      "; expected Float or BFloat16");
  }
}

ReduceScatterBuckets::~ReduceScatterBuckets() = default;

std::vector<int> ReduceScatterBuckets::launchOrder(const std::vector<Bucket>& buckets) const {
  std::vector<int> order = GradSync::launchOrder(buckets);
  std::vector<int> earliest(buckets.size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    earliest[b] = *std::min_element(buckets[b].params.begin(), buckets[b].params.end());
  }
  std::stable_sort(order.begin(), order.end(), [&earliest](int a, int b) { return earliest[a] > earliest[b]; });
  return order;
}

void ReduceScatterBuckets::attach(const FlatLayout& layout, SyncContext& context) {
  layout_ = &layout;
  context_ = &context;
  buildShards();
  slot_of_bucket_.assign(layout.buckets.size(), -1);
  staging_.assign(layout.buckets.size(), torch::Tensor());
  written_.assign(layout.params.size(), 0);
  shard_stale_.assign(layout.buckets.size(), 0);
  for (const Bucket& bucket : layout.buckets) {
    std::vector<std::pair<int64_t, int64_t>> covered;
    for (int p : bucket.params) {
      covered.emplace_back(layout.param_offset[static_cast<size_t>(p)] - bucket.offset,
                           layout.params[static_cast<size_t>(p)].numel());
    }
    std::sort(covered.begin(), covered.end());
    std::vector<std::pair<int64_t, int64_t>> gaps;
    int64_t at = 0;
    for (const auto& [begin, numel] : covered) {
      if (begin > at) gaps.emplace_back(at, begin - at);
      at = std::max(at, begin + numel);
    }
    if (bucket.numel > at) gaps.emplace_back(at, bucket.numel - at);
    gaps_.push_back(std::move(gaps));
  }
  for (size_t i = 0; i < std::min<size_t>(2, layout.buckets.size()); ++i) addStagingBuffer();
}

// This rank's slice of every bucket, each slab's gradient shard (the
// slices of its buckets, in order) and the staging buffers' size.
void ReduceScatterBuckets::buildShards() {
  const FlatLayout& layout = *layout_;
  const int64_t world = context_->comm->size(), rank = context_->comm->rank();
  const ShardSlices slices = shardSlices(layout.pieces, layout.slabs.size(), world);
  const torch::TensorOptions on_device = torch::TensorOptions().device(context_->device());
  for (size_t s = 0; s < layout.slabs.size(); ++s) {
    grad_shards_.push_back(torch::zeros({slices.shard_numel[s]}, on_device.dtype(layout.slab_dtype[s])));
  }
  for (size_t k = 0; k < layout.pieces.size(); ++k) {
    const ShardPiece& piece = layout.pieces[k];
    const size_t s = static_cast<size_t>(piece.slab);
    const int64_t slice = piece.numel / world;
    const torch::Tensor param = layout.master_slices.empty()
                                    ? layout.slabs[s].param.narrow(0, piece.offset + rank * slice, slice)
                                    : layout.master_slices[k];
    shards_.push_back({param, grad_shards_[s].narrow(0, slices.position[k], slice), layout.slabs[s].weight_decay});
    staging_bytes_ = std::max(staging_bytes_, piece.numel * static_cast<int64_t>(c10::elementSize(
                                                                  bucketDtype(static_cast<int>(k)))));
  }
}

torch::ScalarType ReduceScatterBuckets::bucketDtype(int b) const {
  if (reduce_dtype_ == torch::kBFloat16) return torch::kBFloat16;
  return layout_->slab_dtype[static_cast<size_t>(layout_->buckets[static_cast<size_t>(b)].slab)];
}

void ReduceScatterBuckets::started() {
#if DTRAIN_TORCH_CUDA
  std::fill(events_->released_in_backward.begin(), events_->released_in_backward.end(), 0);
#endif
}

torch::Tensor ReduceScatterBuckets::stagingView(int param, int b) const {
  const torch::Tensor& p = layout_->params[static_cast<size_t>(param)];
  const torch::Tensor& staging = staging_[static_cast<size_t>(b)];
  const int64_t offset = staging.storage_offset() + layout_->param_offset[static_cast<size_t>(param)] -
                         layout_->buckets[static_cast<size_t>(b)].offset;
  return staging.as_strided(p.sizes(), p.strides(), offset);
}

// After autograd accumulated the parameter's gradient: write it into its
// bucket's staging buffer (over it if it is the backward's first), then
// drop it, so a rank never holds more than the gradients of the buckets
// being gathered. Undefined: a kernel wrote it there (takeUnwritten).
void ReduceScatterBuckets::gradientReady(int param, int b) {
  stage(b);
  const torch::Tensor& p = layout_->params[static_cast<size_t>(param)];
  torch::Tensor& grad = p.mutable_grad();
  if (!grad.defined()) return;
  torch::NoGradGuard no_grad;
  torch::Tensor view = stagingView(param, b);
  if (written_[static_cast<size_t>(param)]) {
    view.add_(grad);
  } else {
    view.copy_(grad);
    written_[static_cast<size_t>(param)] = 1;
  }
  grad = torch::Tensor();
}

torch::Tensor ReduceScatterBuckets::takeUnwritten(int param, int b) {
  stage(b);
  if (written_[static_cast<size_t>(param)]) return {};
  written_[static_cast<size_t>(param)] = 1;
  return stagingView(param, b);
}

// Before bucket b's ready event: zeros what no gradient was written into.
void ReduceScatterBuckets::prepare(int b) {
  stage(b);
  torch::NoGradGuard no_grad;
#if DTRAIN_TORCH_CUDA
  std::optional<c10::cuda::CUDAStreamGuard> on_compute;
  if (context_->cuda) on_compute.emplace(*context_->streams->compute);
#endif
  const torch::Tensor& staging = staging_[static_cast<size_t>(b)];
  for (int p : layout_->buckets[static_cast<size_t>(b)].params) {
    if (!written_[static_cast<size_t>(p)]) stagingView(p, b).zero_();
  }
  for (const auto& [begin, numel] : gaps_[static_cast<size_t>(b)]) staging.narrow(0, begin, numel).zero_();
}

// Gives bucket b a staging buffer (if it has none): a free one, the oldest
// in-flight bucket's once that is done (CPU), or a new one; none of its
// parameters' gradients written yet.
void ReduceScatterBuckets::stage(int b) {
  if (slot_of_bucket_[static_cast<size_t>(b)] >= 0) return;
  if (free_slots_.empty()) {
    if (!in_flight_.empty()) {
      completeOldest();
    } else {
      addStagingBuffer();
    }
  }
  const int slot = free_slots_.front();
  free_slots_.pop_front();
  slot_of_bucket_[static_cast<size_t>(b)] = slot;
  const torch::ScalarType dtype = bucketDtype(b);
  torch::NoGradGuard no_grad;
  torch::Tensor& staging = staging_[static_cast<size_t>(b)];
  const int64_t bytes = layout_->buckets[static_cast<size_t>(b)].numel * static_cast<int64_t>(c10::elementSize(dtype));
  staging = pool_[static_cast<size_t>(slot)].narrow(0, 0, bytes).view(dtype);
  for (int p : layout_->buckets[static_cast<size_t>(b)].params) written_[static_cast<size_t>(p)] = 0;
#if DTRAIN_TORCH_CUDA
  if (context_->cuda && events_->released_in_backward[static_cast<size_t>(slot)]) {
    // The compute stream (which writes the gradients) waits for the last
    // reduce-scatter that used this slot.
    DTRAIN_CUDA_CHECK(cudaStreamWaitEvent(context_->streams->compute->stream(),
                                          events_->released[static_cast<size_t>(slot)], 0));
  }
#endif
}

void ReduceScatterBuckets::addStagingBuffer() {
  pool_.push_back(torch::empty({staging_bytes_}, torch::TensorOptions().dtype(torch::kByte).device(context_->device())));
  free_slots_.push_back(static_cast<int>(pool_.size()) - 1);
#if DTRAIN_TORCH_CUDA
  if (context_->cuda) {
    cudaEvent_t event = nullptr;
    DTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    events_->released.push_back(event);
    events_->released_in_backward.push_back(0);
  }
#endif
}

// Reduce-scatters bucket b's staging buffer in place (this rank's average
// lands in its slice) and adds the slice into the shard: on CUDA at once on
// the communication stream, freeing the slot for stream-ordered reuse; on
// the CPU once the collective is done (completeOldest).
std::shared_ptr<Work> ReduceScatterBuckets::launch(int b) {
  const Communicator& comm = *context_->comm;
  const torch::Tensor& staging = staging_[static_cast<size_t>(b)];
  const int64_t slice = layout_->buckets[static_cast<size_t>(b)].numel / comm.size();
  const torch::Tensor own = staging.narrow(0, comm.rank() * slice, slice);
  ReduceScatterOptions options;
  options.op = ReduceOp::kAvg;
  options.timeout = context_->timeout;
  void* stream = context_->commStream();
  GradSyncObserver* observer = context_->observer;
  if (observer != nullptr) observer->bucketLaunching(b, stream);
  std::shared_ptr<Work> work = context_->comm->reduceScatter(bufferOf(staging, stream), bufferOf(own, stream), options);
  if (observer != nullptr) observer->bucketLaunched(b, stream);
#if DTRAIN_TORCH_CUDA
  if (context_->cuda) {
    const c10::cuda::CUDAStream& comm_stream = *context_->streams->comm;
    const c10::cuda::CUDAStreamGuard guard(comm_stream);
    addIntoShard(b, own);
    const size_t slot = static_cast<size_t>(slot_of_bucket_[static_cast<size_t>(b)]);
    DTRAIN_CUDA_CHECK(cudaEventRecord(events_->released[slot], comm_stream.stream()));
    events_->released_in_backward[slot] = 1;
    release(b);
    return work;
  }
#endif
  in_flight_.push_back({b, work});
  return work;
}

void ReduceScatterBuckets::finish(const std::vector<std::shared_ptr<Work>>&) {
  while (!in_flight_.empty()) completeOldest();
}

// CPU: waits for the oldest in-flight reduce-scatter and adds its slice
// into the shard.
void ReduceScatterBuckets::completeOldest() {
  const InFlight oldest = in_flight_.front();
  in_flight_.pop_front();
  oldest.work->wait(context_->timeout);
  const int64_t world = context_->comm->size();
  const int64_t slice = layout_->buckets[static_cast<size_t>(oldest.bucket)].numel / world;
  const torch::Tensor& staging = staging_[static_cast<size_t>(oldest.bucket)];
  addIntoShard(oldest.bucket, staging.narrow(0, context_->comm->rank() * slice, slice));
  release(oldest.bucket);
  if (context_->observer != nullptr) context_->observer->bucketCompleted(oldest.bucket);
}

void ReduceScatterBuckets::release(int b) {
  free_slots_.push_back(slot_of_bucket_[static_cast<size_t>(b)]);
  slot_of_bucket_[static_cast<size_t>(b)] = -1;
  staging_[static_cast<size_t>(b)] = torch::Tensor();
}

// This rank's reduced part of bucket b into its shard: over it when the
// shard is stale (zeroGrad(true)), else added.
void ReduceScatterBuckets::addIntoShard(int b, const torch::Tensor& own) {
  torch::NoGradGuard no_grad;
  const torch::Tensor& shard = shards_[static_cast<size_t>(b)].grad;
  if (shard_stale_[static_cast<size_t>(b)]) {
    shard.copy_(own);
    shard_stale_[static_cast<size_t>(b)] = 0;
  } else {
    shard.add_(own);
  }
}

void ReduceScatterBuckets::zeroGrad(bool set_to_none) {
  if (set_to_none) {
    std::fill(shard_stale_.begin(), shard_stale_.end(), 1);
    return;
  }
  for (torch::Tensor& shard : grad_shards_) shard.zero_();
  std::fill(shard_stale_.begin(), shard_stale_.end(), 0);
}

int64_t ReduceScatterBuckets::gradientBytes() const {
  int64_t bytes = 0;
  for (const torch::Tensor& shard : grad_shards_) bytes += shard.numel() * static_cast<int64_t>(shard.element_size());
  return bytes + static_cast<int64_t>(pool_.size()) * staging_bytes_;
}

}  // namespace dtrain
