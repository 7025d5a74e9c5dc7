// DataParallel, the facade: construction composes the layout and the
// pieces (grad_sync.h, sharded_parameters.h); the methods read them. The
// driver of each backward is data_parallel_backward.cc.
#include "dtrain/data_parallel.h"

#include <algorithm>
#include <unordered_set>

#include "comm/communicator.h"
#include "common/error.h"
#include "models/model.h"
#include "parallel/all_reduce_buckets.h"
#include "parallel/bucket_plan.h"
#include "parallel/data_parallel_impl.h"
#include "parallel/reduce_scatter_buckets.h"
#include "parallel/tensor_buffer.h"

#if DTRAIN_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace dtrain {
namespace {

// The one place DataParallelOptions' stage becomes pieces: ZeRO-3
// (shard_parameters) shards the parameters and reduce-scatters; ZeRO-2
// (shard_gradients) reduce-scatters; otherwise buckets are all-reduced.
DataParallelPieces piecesFor(const DataParallelOptions& options) {
  const bool shard_parameters = options.shard_parameters;
  const bool shard_gradients = options.shard_gradients || shard_parameters;
  const auto floating = [](torch::ScalarType t) { return t == torch::kFloat || t == torch::kBFloat16; };
  if (!(floating(options.param_dtype) || options.param_dtype == torch::kHalf) || !floating(options.reduce_dtype)) {
    throw ConfigError(std::string("DataParallel: param_dtype ") + c10::toString(options.param_dtype) +
                      ", reduce_dtype " + c10::toString(options.reduce_dtype) +
                      "; expected Float, BFloat16 or Half, and Float or BFloat16");
  }
  if (options.param_dtype != torch::kFloat && !shard_parameters) {
    throw ConfigError(std::string("DataParallel: param_dtype ") + c10::toString(options.param_dtype) +
                      " needs shard_parameters (ZeRO-3); the other stages "
                      "compute in the parameters' own dtype (use autocast)");
  }
  if (options.reduce_dtype != torch::kFloat && !shard_gradients) {
    throw ConfigError("DataParallel: reduce_dtype BFloat16 needs shard_gradients or shard_parameters (ZeRO-2 "
                      "or ZeRO-3), which reduce from staging buffers");
  }
  DataParallelPieces pieces;
  if (shard_gradients) {
    pieces.grad_sync = std::make_unique<ReduceScatterBuckets>(options.reduce_dtype);
  } else {
    pieces.grad_sync = std::make_unique<AllReduceBuckets>();
  }
  if (shard_parameters) {
    std::vector<std::vector<torch::Tensor>> units = options.units;
    if (units.empty() && options.model != nullptr) units = options.model->shardingUnits();
    pieces.sharded_parameters =
        std::make_unique<ShardedParameters>(std::move(units), options.param_dtype, options.gather_communicator);
  }
  return pieces;
}

void checkOptions(const torch::nn::Module* module, const Communicator* comm, const DataParallelOptions& options,
                  const DataParallelPieces& pieces) {
  if (module == nullptr) throw ConfigError("DataParallel: the module is null");
  if (comm == nullptr) throw ConfigError("DataParallel: the communicator is null");
  if (!pieces.grad_sync) throw ConfigError("DataParallel: no gradient synchronisation piece");
  if (options.bucket_mb <= 0 || options.first_bucket_mb <= 0) {
    throw ConfigError("DataParallel: bucket sizes must be > 0 MiB (got bucket_mb=" +
                      std::to_string(options.bucket_mb) + ", first_bucket_mb=" +
                      std::to_string(options.first_bucket_mb) + ")");
  }
  if (options.slab_multiple < 1) {
    throw ConfigError("DataParallel: slab_multiple is " + std::to_string(options.slab_multiple) +
                      "; expected >= 1");
  }
}

std::vector<torch::Tensor> trainableParameters(torch::nn::Module& module) {
  std::vector<torch::Tensor> params;
  std::unordered_set<const void*> seen;
  for (const torch::Tensor& p : module.parameters(/*recurse=*/true)) {
    if (!p.requires_grad()) continue;
    if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;  // a shared parameter counts once
    params.push_back(p);
  }
  if (params.empty()) throw ConfigError("DataParallel: the module has no trainable parameters");
  const torch::Device device = params.front().device();
  for (const torch::Tensor& p : params) {
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
  return params;
}

// Replicated parameters: every parameter becomes a view into its slab
// (padded to slab_multiple), its .grad a view into the gradient slab when
// the gradient piece keeps full gradients.
void buildSlabs(const SlabPlan& plan, int64_t multiple, bool with_gradients, torch::Device device,
                FlatLayout& layout) {
  torch::NoGradGuard no_grad;
  for (const SlabLayout& slab_layout : plan.slabs) {
    auto tensor_options = torch::TensorOptions().dtype(slab_layout.dtype).device(device);
    const int64_t numel = (slab_layout.numel + multiple - 1) / multiple * multiple;
    layout.padded_numel.push_back(numel);
    FlatSlab slab{torch::zeros({numel}, tensor_options),
                  with_gradients ? torch::zeros({numel}, tensor_options) : torch::Tensor(), slab_layout.weight_decay};
    for (size_t k = 0; k < slab_layout.params.size(); ++k) {
      torch::Tensor& p = layout.params[static_cast<size_t>(slab_layout.params[k])];
      const int64_t offset = slab_layout.offsets[k];
      torch::Tensor view = slab.param.as_strided(p.sizes(), p.strides(), offset);
      view.copy_(p.detach());
      p.set_data(view);
      p.mutable_grad() =
          slab.grad.defined() ? slab.grad.as_strided(p.sizes(), p.strides(), offset) : torch::Tensor();
    }
    layout.slabs.push_back(std::move(slab));
  }
}

}  // namespace

DataParallel::DataParallel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Communicator> communicator,
                           DataParallelOptions options)
    : DataParallel(std::move(module), std::move(communicator), options, piecesFor(options)) {}

DataParallel::DataParallel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Communicator> communicator,
                           DataParallelOptions options, DataParallelPieces&& pieces) {
  checkOptions(module.get(), communicator.get(), options, pieces);
  impl_ = std::make_shared<Impl>();
  Impl& impl = *impl_;
  impl.weak_self = impl_;
  impl.module = std::move(module);
  impl.model = options.model;
  impl.options = std::move(options);
  impl.sync.comm = std::move(communicator);
  impl.sync.timeout = impl.options.timeout;
  impl.grad_sync = std::move(pieces.grad_sync);
  impl.sharded_parameters = std::move(pieces.sharded_parameters);
  impl.layout.params = trainableParameters(*impl.module);
  const torch::Device device = impl.layout.params.front().device();
  impl.sync.cuda = device.is_cuda();
  impl.sync.device_index = device.is_cuda() ? device.index() : 0;
#if DTRAIN_TORCH_CUDA
  if (impl.sync.cuda) {
    impl.sync.streams = std::make_shared<SyncContext::CudaStreams>();
    impl.sync.streams->comm = c10::cuda::getStreamFromPool(/*isHighPriority=*/true,
                                                           static_cast<c10::DeviceIndex>(impl.sync.device_index));
  }
#else
  if (impl.sync.cuda) throw ConfigError("DataParallel: CUDA parameters, but dtrain was built without CUDA support");
#endif
  impl.buildLayout();
  impl.installHooks();
  impl.hookModel();
  if (impl.options.broadcast_at_start && impl.sync.comm->size() > 1) {
    if (!impl.sharded_parameters) syncParameters();  // ZeRO-3 started its shards from rank 0's values
    syncBuffers();
  }
}

// The slabs and buckets, as the pieces want them: ZeRO-3's units make the
// buckets, the gradient piece pads them and orders their launches, and
// the parameters go into slabs or (sharded) into master shards and slots.
void DataParallel::Impl::buildLayout() {
  std::unordered_set<const void*> exempt;
  for (const torch::Tensor& p : options.no_weight_decay) exempt.insert(p.unsafeGetTensorImpl());
  std::vector<bool> decayed;
  if (!exempt.empty()) {
    for (const torch::Tensor& p : layout.params) decayed.push_back(exempt.count(p.unsafeGetTensorImpl()) == 0);
  }
  std::vector<int> unit_of_param;
  if (sharded_parameters) unit_of_param = sharded_parameters->unitOfParameters(layout.params);
  SlabPlan plan = planSlabs(layout.params, options.first_bucket_mb, options.bucket_mb, decayed, unit_of_param);
  for (const SlabLayout& slab : plan.slabs) {
    layout.slab_numel.push_back(slab.numel);
    layout.slab_dtype.push_back(slab.dtype);
  }
  const int64_t multiple = grad_sync->bucketMultiple(sync.comm->size());
  if (multiple > 1) plan = padBuckets(std::move(plan), multiple, layout.pieces);
  layout.buckets = plan.buckets;
  layout.bucket_of_param = plan.bucket_of_param;
  layout.param_offset.assign(layout.params.size(), 0);
  for (const SlabLayout& slab : plan.slabs) {
    for (size_t k = 0; k < slab.params.size(); ++k) layout.param_offset[static_cast<size_t>(slab.params[k])] = slab.offsets[k];
  }
  launch_order = grad_sync->launchOrder(layout.buckets);
  if (sharded_parameters) {
    for (const SlabLayout& slab : plan.slabs) layout.padded_numel.push_back(slab.numel);
    std::weak_ptr<Impl> weak = weak_self;
    sharded_parameters->take(plan, layout, sync, options.broadcast_at_start, [weak] {
      if (auto impl = weak.lock()) impl->backwardStarting();
    });
  } else {
    buildSlabs(plan, options.slab_multiple, grad_sync->keepsFullGradients(), sync.device(), layout);
  }
  grad_sync->attach(layout, sync);
}

// The model's unit hooks, when the caller named the model: ZeRO-3's
// gathers, or for a model with units the start of backward at the loss (in
// the outer graph task, so activation checkpointing's nested backwards are
// never taken for the whole one).
void DataParallel::Impl::hookModel() {
  if (model == nullptr) return;
  if (!sharded_parameters && !model->shardingUnits().empty()) {
    std::weak_ptr<Impl> weak = weak_self;
    backward_start = BackwardStart::create([weak] {
      if (auto impl = weak.lock()) impl->backwardStarting();
    });
  }
  if (hooks() != nullptr) model->setUnitHooks(hooks());
}

DataParallel::~DataParallel() {
  if (!impl_ || impl_->model == nullptr || impl_->hooks() == nullptr) return;
  if (impl_->model->unitHooks() == impl_->hooks()) impl_->model->setUnitHooks(nullptr);
}

const std::shared_ptr<torch::nn::Module>& DataParallel::module() const { return impl_->module; }
const std::vector<torch::Tensor>& DataParallel::parameters() const { return impl_->layout.params; }
const std::vector<FlatSlab>& DataParallel::slabs() const { return impl_->layout.slabs; }
const std::vector<Bucket>& DataParallel::buckets() const { return impl_->layout.buckets; }
int64_t DataParallel::slabNumel(size_t i) const { return impl_->layout.slab_numel.at(i); }
int64_t DataParallel::paddedSlabNumel(size_t slab) const { return impl_->layout.padded_numel.at(slab); }
const std::shared_ptr<Communicator>& DataParallel::communicator() const { return impl_->sync.comm; }
bool DataParallel::shardsGradients() const { return !impl_->grad_sync->keepsFullGradients(); }
bool DataParallel::shardsParameters() const { return impl_->sharded_parameters != nullptr; }
const std::vector<FlatSlab>& DataParallel::shards() const { return impl_->grad_sync->shards(); }
int64_t DataParallel::gradientBytes() const { return impl_->grad_sync->gradientBytes(); }
void DataParallel::zeroGrad(bool set_to_none) {
  if (set_to_none && !impl_->slab_gradients.empty()) {
    for (const auto& slot : impl_->slab_gradients) slot->setStale(true);
    return;
  }
  impl_->grad_sync->zeroGrad(set_to_none);
  for (const auto& slot : impl_->slab_gradients) slot->setStale(false);
}

models::UnitHooks* DataParallel::unitHooks() const {
  return impl_->sharded_parameters ? impl_->sharded_parameters->hooks() : nullptr;
}

void DataParallel::syncParameters() {
  if (impl_->sharded_parameters) {
    throw ConfigError("DataParallel: syncParameters() with sharded parameters (ZeRO-3): each rank holds its own "
                      "slices, started from rank 0's values at construction");
  }
  std::vector<torch::Tensor> flats;
  for (const FlatSlab& slab : impl_->layout.slabs) flats.push_back(slab.param);
  broadcastTensors(*impl_->sync.comm, flats, impl_->options.timeout);
}

void DataParallel::syncBuffers() {
  std::vector<torch::Tensor> buffers;
  for (const torch::Tensor& b : impl_->module->buffers(/*recurse=*/true)) {
    if (b.defined() && b.numel() > 0) buffers.push_back(b);
  }
  broadcastTensors(*impl_->sync.comm, buffers, impl_->options.timeout);
}

ShardLayout DataParallel::shardLayout() const {
  const FlatLayout& layout = impl_->layout;
  if (!shardsGradients()) {
    throw ConfigError("DataParallel: shardLayout() needs shard_gradients (ZeRO-2) or shard_parameters (ZeRO-3)");
  }
  ShardedParameters* sharded = impl_->sharded_parameters.get();
  ShardLayout shard_layout;
  for (size_t s = 0; s < layout.slabs.size(); ++s) {
    if (sharded == nullptr) shard_layout.params.push_back(layout.slabs[s].param);
    shard_layout.weight_decay.push_back(layout.slabs[s].weight_decay);
    shard_layout.numel.push_back(layout.padded_numel[s]);
  }
  shard_layout.logical_numel = layout.slab_numel;
  shard_layout.pieces = layout.pieces;
  for (const FlatSlab& shard : shards()) shard_layout.grads.push_back(shard.grad);
  if (sharded != nullptr) {
    shard_layout.slices = layout.master_slices;
    // The optimizer outlives no DataParallel it serves (TrainingJob's order).
    shard_layout.published = [sharded] { sharded->published(); };
  }
  return shard_layout;
}

std::vector<torch::Tensor> DataParallel::fullParameters() {
  if (!impl_->sharded_parameters) return impl_->layout.params;
  return impl_->sharded_parameters->fullParameters(impl_->layout, impl_->sync);
}

void DataParallel::loadFullParameters(const std::vector<torch::Tensor>& values) {
  const std::vector<torch::Tensor>& params = impl_->layout.params;
  if (values.size() != params.size()) {
    throw ConfigError("DataParallel: " + std::to_string(values.size()) + " parameter values for " +
                      std::to_string(params.size()) + " parameters");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!values[i].sizes().equals(params[i].sizes())) {
      throw ConfigError("DataParallel: parameter " + std::to_string(i) + " has shape " + toString(params[i].sizes()) +
                        "; the value given has " + toString(values[i].sizes()));
    }
  }
  if (impl_->sharded_parameters) {
    impl_->sharded_parameters->load(impl_->layout, impl_->sync.comm->rank(), impl_->sync.comm->size(), values);
    return;
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(values[i]);
}

std::vector<ParameterRun> DataParallel::slabRuns(int slab, int64_t begin, int64_t numel) const {
  const FlatLayout& layout = impl_->layout;
  const int slabs = static_cast<int>(layout.slabs.size());
  const int64_t length = slab < 0 || slab >= slabs ? 0 : layout.padded_numel[static_cast<size_t>(slab)];
  if (slab < 0 || slab >= slabs || begin < 0 || numel < 0 || begin + numel > length) {
    throw ConfigError("DataParallel: elements [" + std::to_string(begin) + ", " + std::to_string(begin + numel) +
                      ") of slab " + std::to_string(slab) + " lie outside its " + std::to_string(length) +
                      " elements");
  }
  std::vector<ParameterRun> runs;
  for (size_t i = 0; i < layout.params.size(); ++i) {
    if (layout.buckets[static_cast<size_t>(layout.bucket_of_param[i])].slab != slab) continue;
    const int64_t first = layout.param_offset[i], last = first + layout.params[i].numel();
    const int64_t from = std::max(first, begin), to = std::min(last, begin + numel);
    if (from < to) runs.push_back({static_cast<int>(i), from - first, to - from, from - begin});
  }
  std::sort(runs.begin(), runs.end(),
            [](const ParameterRun& a, const ParameterRun& b) { return a.position < b.position; });
  return runs;
}

int64_t DataParallel::parameterBytes() const {
  int64_t total = 0;
  for (const FlatSlab& slab : impl_->layout.slabs) {
    if (slab.param.defined()) total += slab.param.numel() * static_cast<int64_t>(slab.param.element_size());
  }
  if (impl_->sharded_parameters) total += impl_->sharded_parameters->bytes();
  return total;
}

bool DataParallel::setNoSync(bool no_sync) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return std::exchange(impl_->no_sync, no_sync);
}

void DataParallel::setObserver(GradSyncObserver* observer) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->sync.observer = observer;
}

GradSyncObserver* DataParallel::observer() const { return impl_->sync.observer; }
int64_t DataParallel::syncedBackwards() const { return impl_->synced_backwards; }

int64_t DataParallel::bucketBytes(int b) const {
  const Bucket& bucket = impl_->layout.buckets.at(static_cast<size_t>(b));
  return bucket.numel * static_cast<int64_t>(c10::elementSize(impl_->grad_sync->bucketDtype(b)));
}

}  // namespace dtrain
