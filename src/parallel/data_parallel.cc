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
#include "models/model.h"
#include "parallel/bucket_plan.h"
#include "parallel/data_parallel_impl.h"
#include "parallel/tensor_buffer.h"

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
  if (options_.shard_parameters) options_.shard_gradients = true;
  checkDtypes();
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
  // A model with units calls our hooks; without sharded parameters only
  // the loss's (backward starts there, in the outer graph task).
  auto* model = dynamic_cast<models::Model*>(module_.get());
  if (!options_.shard_parameters && model != nullptr && !model->shardingUnits().empty()) {
    std::weak_ptr<Impl> weak = impl_;
    impl_->backward_start = BackwardStart::create([weak] {
      if (auto impl = weak.lock()) impl->owner->backwardStarting();
    });
    model->setUnitHooks(impl_->backward_start.get());
  }
  if (options_.broadcast_at_start && comm_->size() > 1) {
    if (!options_.shard_parameters) syncParameters();  // ZeRO-3 started its shards from rank 0's values
    syncBuffers();
  }
}

void DataParallel::checkDtypes() const {
  const auto floating = [](torch::ScalarType t) { return t == torch::kFloat || t == torch::kBFloat16; };
  if (!(floating(options_.param_dtype) || options_.param_dtype == torch::kHalf) || !floating(options_.reduce_dtype)) {
    throw ConfigError(std::string("DataParallel: param_dtype ") + c10::toString(options_.param_dtype) +
                      ", reduce_dtype " + c10::toString(options_.reduce_dtype) +
                      "; expected Float, BFloat16 or Half, and Float or BFloat16");
  }
  if (options_.param_dtype != torch::kFloat && !options_.shard_parameters) {
    throw ConfigError(std::string("DataParallel: param_dtype ") + c10::toString(options_.param_dtype) +
                      " needs shard_parameters (ZeRO-3); the other stages "
                      "compute in the parameters' own dtype (use autocast)");
  }
  if (options_.reduce_dtype != torch::kFloat && !options_.shard_gradients) {
    throw ConfigError("DataParallel: reduce_dtype BFloat16 needs shard_gradients or shard_parameters (ZeRO-2 "
                      "or ZeRO-3), which reduce from staging buffers");
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
  if (options_.shard_parameters) unit_of_param_ = unitOfParameters();
  SlabPlan plan = planSlabs(params_, options_.first_bucket_mb, options_.bucket_mb, decayed, unit_of_param_);
  for (const SlabLayout& layout : plan.slabs) {
    slab_numel_.push_back(layout.numel);
    slab_dtype_.push_back(layout.dtype);
  }
  // ZeRO-2 and ZeRO-3: 64-element slices keep every rank's part aligned.
  if (options_.shard_gradients) plan = padBuckets(std::move(plan), int64_t{64} * comm_->size(), pieces_);
  buckets_ = plan.buckets;
  bucket_of_param_ = plan.bucket_of_param;
  param_offset_.assign(params_.size(), 0);
  for (const SlabLayout& layout : plan.slabs) {
    for (size_t k = 0; k < layout.params.size(); ++k) param_offset_[layout.params[k]] = layout.offsets[k];
  }
  if (options_.slab_multiple < 1) {
    throw ConfigError("DataParallel: slab_multiple is " + std::to_string(options_.slab_multiple) +
                      "; expected >= 1");
  }
  planLaunchOrder();
  if (options_.shard_parameters) {
    for (const SlabLayout& layout : plan.slabs) padded_numel_.push_back(layout.numel);
    buildUnits(plan, device);
    return;
  }
  torch::NoGradGuard no_grad;
  for (const SlabLayout& layout : plan.slabs) {
    auto tensor_options = torch::TensorOptions().dtype(layout.dtype).device(device);
    const int64_t multiple = options_.slab_multiple;
    const int64_t numel = (layout.numel + multiple - 1) / multiple * multiple;
    padded_numel_.push_back(numel);
    // ZeRO-2 keeps no full gradient: autograd's gradients go to staging.
    FlatSlab slab{torch::zeros({numel}, tensor_options),
                  options_.shard_gradients ? torch::Tensor() : torch::zeros({numel}, tensor_options),
                  layout.weight_decay};
    for (size_t k = 0; k < layout.params.size(); ++k) {
      torch::Tensor& p = params_[layout.params[k]];
      const int64_t offset = layout.offsets[k];
      torch::Tensor view = slab.param.as_strided(p.sizes(), p.strides(), offset);
      view.copy_(p.detach());
      p.set_data(view);
      p.mutable_grad() =
          slab.grad.defined() ? slab.grad.as_strided(p.sizes(), p.strides(), offset) : torch::Tensor();
    }
    slabs_.push_back(std::move(slab));
  }
  if (options_.shard_gradients) {
    std::vector<torch::Tensor> full;
    for (const FlatSlab& slab : slabs_) full.push_back(slab.param);
    buildShards(full);
  }
}

// Replicated: plan order (slab by slab). ZeRO-2 and ZeRO-3: the order backward is
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

DataParallel::~DataParallel() {
  if (!impl_ || impl_->hooks() == nullptr) return;
  auto* model = dynamic_cast<models::Model*>(module_.get());
  if (model != nullptr && model->unitHooks() == impl_->hooks()) model->setUnitHooks(nullptr);
}

void DataParallel::zeroGrad() {
  for (FlatSlab& slab : slabs_) {
    if (slab.grad.defined()) slab.grad.zero_();
  }
  for (torch::Tensor& shard : grad_shards_) shard.zero_();
}

void DataParallel::syncParameters() {
  if (options_.shard_parameters) {
    throw ConfigError("DataParallel: syncParameters() with sharded parameters (ZeRO-3): each rank holds its own "
                      "slices, started from rank 0's values at construction");
  }
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

void DataParallel::setObserver(GradSyncObserver* observer) {
  std::lock_guard<std::mutex> lock(mutex_);
  observer_ = observer;
}

int64_t DataParallel::bucketBytes(int b) const {
  const Bucket& bucket = buckets_.at(static_cast<size_t>(b));
  const torch::ScalarType dtype = options_.shard_gradients ? stagingDtype(b) : slab_dtype_[static_cast<size_t>(bucket.slab)];
  return bucket.numel * static_cast<int64_t>(c10::elementSize(dtype));
}

}  // namespace dtrain
