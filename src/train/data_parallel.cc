#include "dtrain/data_parallel.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <unordered_set>

#include "comm/communicator.h"
#include "common/error.h"
#include "train/bucket_plan.h"
#include "train/tensor_buffer.h"

#if DTRAIN_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "gpu/cuda_check.h"
#endif

namespace dtrain {
namespace {

// Runs `fn` after the parameter's gradient was accumulated (a post hook on
// its AccumulateGrad node, as DDP's reducer does). Written against the
// FunctionPostHook interface, which 1.13 and 2.x share.
class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

}  // namespace

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

DataParallel::DataParallel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Communicator> communicator,
                           DataParallelOptions options)
    : module_(std::move(module)), comm_(std::move(communicator)), options_(options) {
  if (!module_) throw ConfigError("DataParallel: the module is null");
  if (!comm_) throw ConfigError("DataParallel: the communicator is null");
  if (options_.bucket_mb <= 0 || options_.first_bucket_mb <= 0) {
    throw ConfigError("DataParallel: bucket sizes must be > 0 MiB (got bucket_mb=" +
                      std::to_string(options_.bucket_mb) + ", first_bucket_mb=" +
                      std::to_string(options_.first_bucket_mb) + ")");
  }
  const torch::Device device = collectParameters();
  impl_ = std::make_shared<Impl>();
  impl_->owner = this;
  impl_->cuda = device.is_cuda();
  impl_->device_index = device.is_cuda() ? device.index() : 0;
#if !DTRAIN_TORCH_CUDA
  if (impl_->cuda) throw ConfigError("DataParallel: CUDA parameters, but dtrain was built without CUDA support");
#endif
  buildSlabs(device);
  installHooks();
  if (options_.broadcast_at_start && comm_->size() > 1) {
    syncParameters();
    syncBuffers();
  }
}

torch::Device DataParallel::collectParameters() {
  std::unordered_set<const void*> seen;
  for (const torch::Tensor& p : module_->parameters(/*recurse=*/true)) {
    if (!p.requires_grad()) continue;
    if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;  // a shared parameter counts once
    params_.push_back(p);
  }
  if (params_.empty()) throw ConfigError("DataParallel: the module has no trainable parameters");
  const torch::Device device = params_.front().device();
  for (const torch::Tensor& p : params_) {
    if (p.device() != device) {
      throw ConfigError("DataParallel: parameters live on " + device.str() + " and " + p.device().str() +
                        "; move the whole module to one device first");
    }
    if (p.is_sparse() || !p.is_non_overlapping_and_dense()) {
      throw ConfigError("DataParallel: parameter of shape " + toString(p.sizes()) +
                        " is sparse or not dense; expected dense parameters");
    }
    dtypeOf(p.scalar_type());  // rejects dtypes the collectives cannot average
  }
  return device;
}

// Moves every parameter into its slab (a view), its .grad into the gradient
// slab, and plans the buckets.
void DataParallel::buildSlabs(torch::Device device) {
  std::unordered_set<const void*> exempt;
  for (const torch::Tensor& p : options_.no_weight_decay) exempt.insert(p.unsafeGetTensorImpl());
  std::vector<bool> decayed;
  if (!exempt.empty()) {
    for (const torch::Tensor& p : params_) decayed.push_back(exempt.count(p.unsafeGetTensorImpl()) == 0);
  }
  SlabPlan plan = planSlabs(params_, options_.first_bucket_mb, options_.bucket_mb, decayed);
  for (const SlabLayout& layout : plan.slabs) slab_numel_.push_back(layout.numel);
  // ZeRO-2: 64-element slices keep every rank's part aligned.
  if (options_.shard_gradients) plan = padBuckets(std::move(plan), int64_t{64} * comm_->size(), pieces_);
  buckets_ = plan.buckets;
  bucket_of_param_ = plan.bucket_of_param;
  param_offset_.assign(params_.size(), 0);
  torch::NoGradGuard no_grad;
  if (options_.slab_multiple < 1) {
    throw ConfigError("DataParallel: slab_multiple is " + std::to_string(options_.slab_multiple) +
                      "; expected >= 1");
  }
  for (const SlabLayout& layout : plan.slabs) {
    auto tensor_options = torch::TensorOptions().dtype(layout.dtype).device(device);
    const int64_t multiple = options_.slab_multiple;
    const int64_t numel = (layout.numel + multiple - 1) / multiple * multiple;
    // ZeRO-2 keeps no full gradient: autograd's gradients go to staging.
    FlatSlab slab{torch::zeros({numel}, tensor_options),
                  options_.shard_gradients ? torch::Tensor() : torch::zeros({numel}, tensor_options),
                  layout.weight_decay};
    for (size_t k = 0; k < layout.params.size(); ++k) {
      torch::Tensor& p = params_[layout.params[k]];
      const int64_t offset = layout.offsets[k];
      param_offset_[layout.params[k]] = offset;
      torch::Tensor view = slab.param.as_strided(p.sizes(), p.strides(), offset);
      view.copy_(p.detach());
      p.set_data(view);
      p.mutable_grad() =
          slab.grad.defined() ? slab.grad.as_strided(p.sizes(), p.strides(), offset) : torch::Tensor();
    }
    slabs_.push_back(std::move(slab));
  }
  planLaunchOrder();
  if (options_.shard_gradients) buildShards();
}

// Replicated: plan order (slab by slab). ZeRO-2: the order backward is
// expected to finish the buckets in, across slabs (by their earliest
// registered parameter, latest first), so that a slab's buckets do not
// hold staging buffers while another slab's wait for their turn (a
// model's no-weight-decay slab has buckets throughout backward).
void DataParallel::planLaunchOrder() {
  launch_order_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) launch_order_[b] = static_cast<int>(b);
  if (!options_.shard_gradients) return;
  std::vector<int> earliest(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    earliest[b] = *std::min_element(buckets_[b].params.begin(), buckets_[b].params.end());
  }
  std::stable_sort(launch_order_.begin(), launch_order_.end(),
                   [&earliest](int a, int b) { return earliest[a] > earliest[b]; });
}

// ZeRO-2: this rank's slice of every bucket, each slab's gradient shard
// (the slices of its buckets, in order) and the staging buffers' size.
void DataParallel::buildShards() {
  const int64_t world = comm_->size(), rank = comm_->rank();
  std::vector<int64_t> shard_numel(slabs_.size(), 0);
  for (const ShardPiece& piece : pieces_) shard_numel[static_cast<size_t>(piece.slab)] += piece.numel / world;
  for (size_t s = 0; s < slabs_.size(); ++s) grad_shards_.push_back(torch::zeros({shard_numel[s]}, slabs_[s].param.options()));
  std::vector<int64_t> position(slabs_.size(), 0);
  for (const ShardPiece& piece : pieces_) {
    const size_t s = static_cast<size_t>(piece.slab);
    const int64_t slice = piece.numel / world;
    shards_.push_back({slabs_[s].param.narrow(0, piece.offset + rank * slice, slice),
                       grad_shards_[s].narrow(0, position[s], slice), slabs_[s].weight_decay});
    position[s] += slice;
    staging_bytes_ = std::max(staging_bytes_, piece.numel * static_cast<int64_t>(slabs_[s].param.element_size()));
  }
}

ShardLayout DataParallel::shardLayout() const {
  if (!options_.shard_gradients) throw ConfigError("DataParallel: shardLayout() needs shard_gradients (ZeRO-2)");
  ShardLayout layout;
  for (const FlatSlab& slab : slabs_) {
    layout.params.push_back(slab.param);
    layout.weight_decay.push_back(slab.weight_decay);
  }
  layout.logical_numel = slab_numel_;
  layout.pieces = pieces_;
  for (const FlatSlab& shard : shards_) layout.grads.push_back(shard.grad);
  return layout;
}

int64_t DataParallel::gradientBytes() const {
  int64_t bytes = 0;
  for (const FlatSlab& slab : slabs_) {
    if (slab.grad.defined()) bytes += slab.grad.numel() * static_cast<int64_t>(slab.grad.element_size());
  }
  for (const torch::Tensor& shard : grad_shards_) bytes += shard.numel() * static_cast<int64_t>(shard.element_size());
  return bytes + static_cast<int64_t>(impl_->pool.size()) * staging_bytes_;
}

// The per-backward bookkeeping, the communication stream, and a hook on
// every parameter's gradient accumulator.
void DataParallel::installHooks() {
  impl_->initial_pending.assign(buckets_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) impl_->initial_pending[b] = static_cast<int>(buckets_[b].params.size());
  impl_->pending = impl_->initial_pending;
  impl_->ready.assign(buckets_.size(), 0);
#if DTRAIN_TORCH_CUDA
  if (impl_->cuda) {
    impl_->comm_stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/true,
                                                      static_cast<c10::DeviceIndex>(impl_->device_index));
    for (size_t b = 0; b < buckets_.size(); ++b) impl_->ready_events.push_back(Impl::makeEvent());
    impl_->joined_event = Impl::makeEvent();
  }
#endif
  if (options_.shard_gradients) {
    impl_->slot_of_bucket.assign(buckets_.size(), -1);
    impl_->staging.assign(buckets_.size(), torch::Tensor());
    for (size_t i = 0; i < std::min<size_t>(2, buckets_.size()); ++i) addStagingBuffer();
  }
  std::weak_ptr<Impl> weak = impl_;
  for (size_t i = 0; i < params_.size(); ++i) {
    std::shared_ptr<torch::autograd::Node> accumulator = torch::autograd::impl::grad_accumulator(params_[i]);
    const int index = static_cast<int>(i);
    accumulator->add_post_hook(std::make_unique<GradReadyHook>([weak, index] {
      if (auto impl = weak.lock()) impl->owner->onGradReady(index);
    }));
    impl_->accumulators.push_back(std::move(accumulator));
  }
}

DataParallel::~DataParallel() = default;

void DataParallel::zeroGrad() {
  for (FlatSlab& slab : slabs_) {
    if (slab.grad.defined()) slab.grad.zero_();
  }
  for (torch::Tensor& shard : grad_shards_) shard.zero_();
}

void DataParallel::syncParameters() {
  std::vector<torch::Tensor> flats;
  for (const FlatSlab& slab : slabs_) flats.push_back(slab.param);
  broadcastTensors(flats);
}

void DataParallel::syncBuffers() {
  std::vector<torch::Tensor> buffers;
  for (const torch::Tensor& b : module_->buffers(/*recurse=*/true)) {
    if (b.defined() && b.numel() > 0) buffers.push_back(b);
  }
  broadcastTensors(buffers);
}

void DataParallel::broadcastTensors(const std::vector<torch::Tensor>& tensors) {
  if (comm_->size() == 1 || tensors.empty()) return;
  torch::NoGradGuard no_grad;
  // One broadcast per dtype: pack into a flat tensor unless it already is one.
  std::map<torch::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (const torch::Tensor& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  for (auto& [dtype, group] : by_dtype) {
    const bool single_flat = group.size() == 1 && group[0].dim() == 1 && group[0].is_contiguous();
    torch::Tensor flat = single_flat ? group[0] : torch::cat(flattenAll(group));
    BroadcastOptions options;
    options.root = 0;
    options.timeout = options_.timeout;
    Buffer buffer = bufferOf(flat, currentStreamOf(flat));
    comm_->broadcast(buffer, options)->wait(options_.timeout);
    if (!single_flat) {
      int64_t offset = 0;
      for (const torch::Tensor& t : group) {
        t.copy_(flat.narrow(0, offset, t.numel()).view_as(t));
        offset += t.numel();
      }
    }
  }
}

void DataParallel::onGradReady(int param) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (no_sync_ && !options_.shard_gradients) return;  // ZeRO-2 has no full gradient to accumulate into
  Impl& impl = *impl_;
  if (!impl.in_backward) startBackward();
  const int b = bucket_of_param_[param];
  if (options_.shard_gradients) stageGradient(param, b);
  if (--impl.pending[b] != 0) return;
  impl.ready[b] = 1;
#if DTRAIN_TORCH_CUDA
  if (impl.cuda) {
    DTRAIN_CUDA_CHECK(cudaEventRecord(impl.ready_events[b], static_cast<cudaStream_t>(impl.compute_stream)));
  }
#endif
  if (observer_ != nullptr) observer_->bucketReady(b, impl.compute_stream);
  // Buckets start in launch order on every rank, whatever order they got ready in.
  while (impl.next_bucket < static_cast<int>(buckets_.size()) && impl.ready[launch_order_[impl.next_bucket]]) {
    launchBucket(launch_order_[impl.next_bucket++]);
  }
}

// The first gradient of a backward: check the last one's collectives (a
// failure recorded since then surfaces here) and arrange the finish.
void DataParallel::startBackward() {
  Impl& impl = *impl_;
  for (const auto& work : impl.previous_works) {
    if (work->isCompleted() && work->exception()) std::rethrow_exception(work->exception());
  }
  impl.previous_works.clear();
  impl.in_backward = true;
#if DTRAIN_TORCH_CUDA
  if (impl.cuda) {
    impl.compute = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(impl.device_index));
    impl.compute_stream = impl.compute->stream();
    std::fill(impl.released_in_backward.begin(), impl.released_in_backward.end(), 0);
  }
#endif
  if (observer_ != nullptr) observer_->backwardStarted(impl.compute_stream);
  std::weak_ptr<Impl> weak = impl_;
  torch::autograd::Engine::get_default_engine().queue_callback([weak] {
    if (auto alive = weak.lock()) alive->owner->finishBackward();
  });
}

void DataParallel::launchBucket(int b) {
  Impl& impl = *impl_;
  // ZeRO-2: a bucket none of whose parameters got a gradient gets its
  // (zeroed) staging buffer before its ready event.
  if (options_.shard_gradients) acquireStaging(b);
  void* stream = impl.commStream();
#if DTRAIN_TORCH_CUDA
  if (impl.cuda) {
    // The communication stream waits for this bucket's gradients only, so
    // the rest of backward keeps running on the compute stream.
    const auto compute = static_cast<cudaStream_t>(impl.compute_stream);
    if (!impl.ready[b]) DTRAIN_CUDA_CHECK(cudaEventRecord(impl.ready_events[b], compute));
    DTRAIN_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), impl.ready_events[b], 0));
  }
#endif
  if (options_.shard_gradients) {
    launchReduceScatter(b);
    return;
  }
  const Bucket& bucket = buckets_[b];
  torch::Tensor grad = slabs_[bucket.slab].grad.narrow(0, bucket.offset, bucket.numel);
  AllreduceOptions options;
  options.op = ReduceOp::kAvg;
  options.timeout = options_.timeout;
  if (observer_ != nullptr) observer_->bucketLaunching(b, stream);
  impl.works.push_back(comm_->allreduce(bufferOf(grad, stream), bufferOf(grad, stream), options));
  if (observer_ != nullptr) observer_->bucketLaunched(b, stream);
}

void DataParallel::finishBackward() {
  std::lock_guard<std::mutex> lock(mutex_);
  Impl& impl = *impl_;
  if (!impl.in_backward) return;
  if (observer_ != nullptr) observer_->backwardEnded(impl.compute_stream);
  // Buckets with gradients that never came (unused parameters) go now, in order.
  while (impl.next_bucket < static_cast<int>(buckets_.size())) launchBucket(launch_order_[impl.next_bucket++]);

  std::vector<std::shared_ptr<Work>> works;
  works.swap(impl.works);
  impl.in_backward = false;
  impl.next_bucket = 0;
  impl.pending = impl.initial_pending;
  std::fill(impl.ready.begin(), impl.ready.end(), 0);
  ++synced_backwards_;

  if (impl.cuda) {
#if DTRAIN_TORCH_CUDA
    // The optimizer (on the compute stream) waits for the last collective
    // (and, ZeRO-2, the last addition into the shard); the host does not.
    DTRAIN_CUDA_CHECK(cudaEventRecord(impl.joined_event, impl.comm_stream->stream()));
    DTRAIN_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(impl.compute_stream), impl.joined_event, 0));
    impl.previous_works = std::move(works);
#endif
    return;
  }
  if (options_.shard_gradients) {
    while (!impl.in_flight.empty()) completeOldest();
    return;
  }
  for (size_t i = 0; i < works.size(); ++i) {
    works[i]->wait(options_.timeout);
    if (observer_ != nullptr) observer_->bucketCompleted(static_cast<int>(i));
  }
}

// ZeRO-2, in the hook after autograd accumulated the parameter's gradient:
// add it into its bucket's staging buffer, then drop it, so a rank never
// holds more than the gradients of the buckets being gathered.
void DataParallel::stageGradient(int param, int b) {
  acquireStaging(b);
  torch::Tensor& grad = params_[param].mutable_grad();
  if (!grad.defined()) return;
  torch::NoGradGuard no_grad;
  const torch::Tensor& staging = impl_->staging[b];
  const torch::Tensor& p = params_[param];
  const int64_t offset = staging.storage_offset() + param_offset_[param] - buckets_[b].offset;
  staging.as_strided(p.sizes(), p.strides(), offset).add_(grad);
  grad = torch::Tensor();
}

// Gives bucket b a zeroed staging buffer (if it has none): a free one, the
// oldest in-flight bucket's once that is done (CPU), or a new one.
void DataParallel::acquireStaging(int b) {
  Impl& impl = *impl_;
  if (impl.slot_of_bucket[b] >= 0) return;
  if (impl.free_slots.empty()) {
    if (!impl.in_flight.empty()) {
      completeOldest();
    } else {
      addStagingBuffer();
    }
  }
  const int slot = impl.free_slots.front();
  impl.free_slots.pop_front();
  impl.slot_of_bucket[b] = slot;
  const torch::Tensor& param = slabs_[buckets_[b].slab].param;
  torch::NoGradGuard no_grad;
  impl.staging[b] = impl.pool[slot].narrow(0, 0, buckets_[b].numel * param.element_size()).view(param.scalar_type());
#if DTRAIN_TORCH_CUDA
  if (impl.cuda) {
    // On the compute stream (a final callback may run with another one
    // current), after the last reduce-scatter that used this slot.
    const c10::cuda::CUDAStreamGuard guard(*impl.compute);
    if (impl.released_in_backward[slot]) {
      DTRAIN_CUDA_CHECK(cudaStreamWaitEvent(impl.compute->stream(), impl.released_events[slot], 0));
    }
    impl.staging[b].zero_();
    return;
  }
#endif
  impl.staging[b].zero_();
}

void DataParallel::addStagingBuffer() {
  Impl& impl = *impl_;
  const torch::Device device = slabs_.front().param.device();
  impl.pool.push_back(torch::empty({staging_bytes_}, torch::TensorOptions().dtype(torch::kByte).device(device)));
  impl.free_slots.push_back(static_cast<int>(impl.pool.size()) - 1);
#if DTRAIN_TORCH_CUDA
  if (impl.cuda) {
    impl.released_events.push_back(Impl::makeEvent());
    impl.released_in_backward.push_back(0);
  }
#endif
}

// Reduce-scatters bucket b's staging buffer in place (this rank's average
// lands in its slice) and adds the slice into the shard: on CUDA at once on
// the communication stream, freeing the slot for stream-ordered reuse; on
// the CPU once the collective is done (completeOldest).
void DataParallel::launchReduceScatter(int b) {
  Impl& impl = *impl_;
  const torch::Tensor& staging = impl.staging[b];
  const int64_t slice = buckets_[b].numel / comm_->size();
  const torch::Tensor own = staging.narrow(0, comm_->rank() * slice, slice);
  ReduceScatterOptions options;
  options.op = ReduceOp::kAvg;
  options.timeout = options_.timeout;
  void* stream = impl.commStream();
  if (observer_ != nullptr) observer_->bucketLaunching(b, stream);
  impl.works.push_back(comm_->reduceScatter(bufferOf(staging, stream), bufferOf(own, stream), options));
  if (observer_ != nullptr) observer_->bucketLaunched(b, stream);
#if DTRAIN_TORCH_CUDA
  if (impl.cuda) {
    const c10::cuda::CUDAStreamGuard guard(*impl.comm_stream);
    torch::NoGradGuard no_grad;
    shards_[b].grad.add_(own);
    const int slot = impl.slot_of_bucket[b];
    DTRAIN_CUDA_CHECK(cudaEventRecord(impl.released_events[slot], impl.comm_stream->stream()));
    impl.released_in_backward[slot] = 1;
    releaseStaging(b);
    return;
  }
#endif
  impl.in_flight.push_back({b, impl.works.back()});
}

// CPU: waits for the oldest in-flight reduce-scatter and adds its slice
// into the shard.
void DataParallel::completeOldest() {
  Impl& impl = *impl_;
  const Impl::InFlight oldest = impl.in_flight.front();
  impl.in_flight.pop_front();
  oldest.work->wait(options_.timeout);
  const int64_t slice = buckets_[oldest.bucket].numel / comm_->size();
  {
    torch::NoGradGuard no_grad;
    shards_[oldest.bucket].grad.add_(impl.staging[oldest.bucket].narrow(0, comm_->rank() * slice, slice));
  }
  releaseStaging(oldest.bucket);
  if (observer_ != nullptr) observer_->bucketCompleted(oldest.bucket);
}

void DataParallel::releaseStaging(int b) {
  Impl& impl = *impl_;
  impl.free_slots.push_back(impl.slot_of_bucket[b]);
  impl.slot_of_bucket[b] = -1;
  impl.staging[b] = torch::Tensor();
}

void DataParallel::setObserver(GradSyncObserver* observer) {
  std::lock_guard<std::mutex> lock(mutex_);
  observer_ = observer;
}

int64_t DataParallel::bucketBytes(int b) const {
  const Bucket& bucket = buckets_.at(static_cast<size_t>(b));
  return bucket.numel * static_cast<int64_t>(slabs_[static_cast<size_t>(bucket.slab)].param.element_size());
}

}  // namespace dtrain
