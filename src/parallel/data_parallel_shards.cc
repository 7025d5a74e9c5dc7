// DataParallel's sharded stages: ZeRO-2's gradient shards, staging buffers
// and reduce-scatters, and ZeRO-3's master shards, gather slots and units
// (the contract is in include/dtrain/data_parallel.h).
#include <algorithm>
#include <unordered_map>

#include "comm/communicator.h"
#include "common/error.h"
#include "models/model.h"
#include "parallel/bucket_plan.h"
#include "parallel/data_parallel_impl.h"
#include "parallel/tensor_buffer.h"

#if DTRAIN_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#endif

namespace dtrain {

torch::ScalarType DataParallel::stagingDtype(int bucket) const {
  if (options_.reduce_dtype == torch::kBFloat16) return torch::kBFloat16;
  return slab_dtype_[static_cast<size_t>(buckets_[static_cast<size_t>(bucket)].slab)];
}

torch::Device DataParallel::device() const {
  if (impl_->cuda) return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(impl_->device_index));
  return torch::kCPU;
}

// ZeRO-2: this rank's slice of every bucket, each slab's gradient shard
// (the slices of its buckets, in order) and the staging buffers' size.
// ZeRO-3: the parameters' slices are copied into a master shard per slab,
// `full` (the full slabs) being gone once construction is over.
void DataParallel::buildShards(const std::vector<torch::Tensor>& full) {
  const int64_t world = comm_->size(), rank = comm_->rank();
  const size_t slabs = full.size();
  std::vector<int64_t> shard_numel(slabs, 0);
  for (const ShardPiece& piece : pieces_) shard_numel[static_cast<size_t>(piece.slab)] += piece.numel / world;
  for (size_t s = 0; s < slabs; ++s) {
    grad_shards_.push_back(torch::zeros({shard_numel[s]}, full[s].options()));
    if (options_.shard_parameters) param_shards_.push_back(torch::empty({shard_numel[s]}, full[s].options()));
  }
  torch::NoGradGuard no_grad;
  std::vector<int64_t> position(slabs, 0);
  for (size_t k = 0; k < pieces_.size(); ++k) {
    const ShardPiece& piece = pieces_[k];
    const size_t s = static_cast<size_t>(piece.slab);
    const int64_t slice = piece.numel / world;
    torch::Tensor param = full[s].narrow(0, piece.offset + rank * slice, slice);
    if (options_.shard_parameters) {
      param_shards_[s].narrow(0, position[s], slice).copy_(param);
      param = param_shards_[s].narrow(0, position[s], slice);
    }
    shards_.push_back({param, grad_shards_[s].narrow(0, position[s], slice), slabs_[s].weight_decay});
    shard_position_.push_back(position[s]);
    position[s] += slice;
    staging_bytes_ = std::max(staging_bytes_, piece.numel * static_cast<int64_t>(c10::elementSize(
                                                                  stagingDtype(static_cast<int>(k)))));
  }
}

ShardLayout DataParallel::shardLayout() const {
  if (!options_.shard_gradients) {
    throw ConfigError("DataParallel: shardLayout() needs shard_gradients (ZeRO-2) or shard_parameters (ZeRO-3)");
  }
  ShardLayout layout;
  for (size_t s = 0; s < slabs_.size(); ++s) {
    if (!options_.shard_parameters) layout.params.push_back(slabs_[s].param);
    layout.weight_decay.push_back(slabs_[s].weight_decay);
    layout.numel.push_back(padded_numel_[s]);
  }
  layout.logical_numel = slab_numel_;
  layout.pieces = pieces_;
  for (const FlatSlab& shard : shards_) {
    layout.grads.push_back(shard.grad);
    if (options_.shard_parameters) layout.slices.push_back(shard.param);
  }
  if (options_.shard_parameters) {
    // The optimizer outlives no DataParallel it serves (TrainingJob's order).
    DataParallel* self = const_cast<DataParallel*>(this);
    layout.published = [self] { self->publishShards(); };
  }
  return layout;
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
  const torch::ScalarType dtype = stagingDtype(b);
  torch::NoGradGuard no_grad;
  impl.staging[b] =
      impl.pool[slot].narrow(0, 0, buckets_[b].numel * static_cast<int64_t>(c10::elementSize(dtype))).view(dtype);
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
  impl.pool.push_back(torch::empty({staging_bytes_}, torch::TensorOptions().dtype(torch::kByte).device(device())));
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

// ZeRO-3: which unit each parameter belongs to (options.units, or the
// model's own), checking that every parameter is in exactly one.
std::vector<int> DataParallel::unitOfParameters() {
  std::vector<std::vector<torch::Tensor>> units = options_.units;
  auto* model = dynamic_cast<models::Model*>(module_.get());
  if (units.empty() && model != nullptr) units = model->shardingUnits();
  if (units.empty()) {
    throw ConfigError("DataParallel: sharded parameters (ZeRO-3) need the model's units: a model with "
                      "sharding units (gpt2, llama) or DataParallelOptions::units");
  }
  std::unordered_map<const void*, int> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].unsafeGetTensorImpl()] = static_cast<int>(i);
  std::vector<int> unit_of(params_.size(), -1);
  for (size_t u = 0; u < units.size(); ++u) {
    for (const torch::Tensor& p : units[u]) {
      auto it = index.find(p.unsafeGetTensorImpl());
      if (it == index.end()) continue;  // frozen, or listed twice within the unit (a tied weight)
      int& unit = unit_of[static_cast<size_t>(it->second)];
      if (unit >= 0 && unit != static_cast<int>(u)) {
        throw ConfigError("DataParallel: a parameter of shape " + toString(p.sizes()) + " is in units " +
                          std::to_string(unit) + " and " + std::to_string(u) + "; expected one unit each");
      }
      unit = static_cast<int>(u);
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (unit_of[i] < 0) {
      throw ConfigError("DataParallel: a parameter of shape " + toString(params_[i].sizes()) +
                        " is in none of the model's " + std::to_string(units.size()) + " units");
    }
  }
  unit_count_ = static_cast<int>(units.size());
  return unit_of;
}

// ZeRO-3: the full slabs exist only here, long enough to start every rank
// from rank 0's values and cut the master shards out of them. Then each
// unit's buckets get their place in its slot, the parameters become views
// into the slots, and the gathering is wired to the model.
void DataParallel::buildUnits(const SlabPlan& plan, torch::Device device) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> full;
  for (const SlabLayout& layout : plan.slabs) {
    torch::Tensor slab = torch::zeros({layout.numel}, torch::TensorOptions().dtype(layout.dtype).device(device));
    for (size_t k = 0; k < layout.params.size(); ++k) {
      torch::Tensor& p = params_[static_cast<size_t>(layout.params[k])];
      torch::Tensor view = slab.as_strided(p.sizes(), p.strides(), layout.offsets[k]);
      view.copy_(p.detach());
      p.set_data(view);  // the parameter's own memory goes now, not after every slab is built
    }
    full.push_back(slab);
    slabs_.push_back(FlatSlab{torch::Tensor(), torch::Tensor(), layout.weight_decay});
  }
  if (options_.broadcast_at_start && comm_->size() > 1) broadcastTensors(full);
  buildShards(full);
  full.clear();

  // Slot 0: the root's buckets; slots 1 and 2: the blocks', alternating.
  std::vector<int> unit_of_bucket(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) unit_of_bucket[b] = unit_of_param_[static_cast<size_t>(buckets_[b].params[0])];
  std::vector<int64_t> unit_numel(static_cast<size_t>(unit_count_), 0), place(buckets_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t& numel = unit_numel[static_cast<size_t>(unit_of_bucket[b])];
    place[b] = numel;
    numel += buckets_[b].numel;
  }
  const int block_slots = std::min(2, unit_count_ - 1);
  const auto slot_of = [block_slots](int unit) { return unit == 0 ? 0 : 1 + (unit - 1) % block_slots; };
  std::vector<int64_t> slot_numel(static_cast<size_t>(1 + block_slots), 0);
  for (int u = 0; u < unit_count_; ++u) {
    int64_t& numel = slot_numel[static_cast<size_t>(slot_of(u))];
    numel = std::max(numel, unit_numel[static_cast<size_t>(u)]);
  }
  for (int64_t numel : slot_numel) {
    slots_.push_back(torch::zeros({numel}, torch::TensorOptions().dtype(options_.param_dtype).device(device)));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i];
    const int b = bucket_of_param_[i];
    const int64_t offset = place[static_cast<size_t>(b)] + param_offset_[i] - buckets_[static_cast<size_t>(b)].offset;
    p.set_data(slots_[static_cast<size_t>(slot_of(unit_of_param_[i]))].as_strided(p.sizes(), p.strides(), offset));
    p.mutable_grad() = torch::Tensor();
  }

  std::vector<UnitGather::Unit> units(static_cast<size_t>(unit_count_));
  for (int u = 0; u < unit_count_; ++u) units[static_cast<size_t>(u)].slot = slot_of(u);
  const int64_t world = comm_->size();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    UnitGather::Unit& unit = units[static_cast<size_t>(unit_of_bucket[b])];
    const torch::Tensor& master = param_shards_[static_cast<size_t>(bucket.slab)];
    unit.parts.push_back({master.narrow(0, shard_position_[b], bucket.numel / world),
                          slots_[static_cast<size_t>(unit.slot)].narrow(0, place[b], bucket.numel)});
  }
  std::weak_ptr<Impl> weak = impl_;
  impl_->gather = UnitGather::create(
      std::move(units), options_.gather_communicator ? options_.gather_communicator : comm_, options_.timeout,
      [weak] {
        if (auto impl = weak.lock()) impl->owner->backwardStarting();
      });
  if (auto* model = dynamic_cast<models::Model*>(module_.get())) model->setUnitHooks(impl_->gather.get());
}

// ZeRO-3, after each optimizer step (or a load): the slots refill from the
// master shards at the next forward.
void DataParallel::publishShards() { impl_->gather->invalidate(); }

// The loss's gradient arrived (unit 0's hook), in the outer
// backward's graph task: the backward's bookkeeping starts here rather than
// at the first gradient, which may come from a nested (recomputing) task.
void DataParallel::backwardStarting() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (no_sync_ && !options_.shard_gradients) return;  // a backward that only accumulates
  if (!impl_->in_backward) startBackward();
}

models::UnitHooks* DataParallel::unitHooks() const { return impl_->gather.get(); }

std::vector<torch::Tensor> DataParallel::fullParameters() {
  if (!options_.shard_parameters) return params_;
  torch::NoGradGuard no_grad;
  const int64_t world = comm_->size();
  std::vector<torch::Tensor> full;
  for (size_t s = 0; s < slabs_.size(); ++s) {
    full.push_back(torch::zeros({padded_numel_[s]}, param_shards_[s].options()));
  }
  AllgatherOptions options;
  options.timeout = options_.timeout;
  for (size_t k = 0; k < pieces_.size(); ++k) {
    const ShardPiece& piece = pieces_[k];
    const torch::Tensor whole = full[static_cast<size_t>(piece.slab)].narrow(0, piece.offset, piece.numel);
    void* stream = currentStreamOf(whole);
    auto work = comm_->allgather(bufferOf(shards_[k].param, stream), bufferOf(whole, stream), options);
    if (!whole.is_cuda()) work->wait(options_.timeout);
  }
  (void)world;
  std::vector<torch::Tensor> values;
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i];
    const size_t s = static_cast<size_t>(buckets_[static_cast<size_t>(bucket_of_param_[i])].slab);
    values.push_back(full[s].as_strided(p.sizes(), p.strides(), param_offset_[i]));
  }
  return values;
}

void DataParallel::loadFullParameters(const std::vector<torch::Tensor>& values) {
  if (values.size() != params_.size()) {
    throw ConfigError("DataParallel: " + std::to_string(values.size()) + " parameter values for " +
                      std::to_string(params_.size()) + " parameters");
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!values[i].sizes().equals(params_[i].sizes())) {
      throw ConfigError("DataParallel: parameter " + std::to_string(i) + " has shape " +
                        toString(params_[i].sizes()) + "; the value given has " + toString(values[i].sizes()));
    }
  }
  torch::NoGradGuard no_grad;
  if (!options_.shard_parameters) {
    for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(values[i]);
    return;
  }
  const int64_t world = comm_->size(), rank = comm_->rank();
  for (size_t k = 0; k < pieces_.size(); ++k) {
    const ShardPiece& piece = pieces_[k];
    const int64_t begin = piece.offset + rank * (piece.numel / world), end = begin + piece.numel / world;
    const torch::Tensor& slice = shards_[k].param;
    slice.zero_();
    // The parameters of this piece's bucket that overlap this rank's slice.
    for (int i : buckets_[k].params) {
      const int64_t first = param_offset_[static_cast<size_t>(i)], last = first + params_[static_cast<size_t>(i)].numel();
      const int64_t from = std::max(first, begin), to = std::min(last, end);
      if (from >= to) continue;
      const torch::Tensor flat = values[static_cast<size_t>(i)].reshape({-1}).to(slice.device(), slice.scalar_type());
      slice.narrow(0, from - begin, to - from).copy_(flat.narrow(0, from - first, to - from));
    }
  }
  publishShards();
}

std::vector<ParameterRun> DataParallel::slabRuns(int slab, int64_t begin, int64_t numel) const {
  if (slab < 0 || slab >= static_cast<int>(slabs_.size()) || begin < 0 || numel < 0 ||
      begin + numel > padded_numel_[static_cast<size_t>(slab)]) {
    throw ConfigError("DataParallel: elements [" + std::to_string(begin) + ", " + std::to_string(begin + numel) +
                      ") of slab " + std::to_string(slab) + " lie outside its " +
                      std::to_string(slab < 0 || slab >= static_cast<int>(slabs_.size())
                                         ? 0
                                         : padded_numel_[static_cast<size_t>(slab)]) +
                      " elements");
  }
  std::vector<ParameterRun> runs;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (buckets_[static_cast<size_t>(bucket_of_param_[i])].slab != slab) continue;
    const int64_t first = param_offset_[i], last = first + params_[i].numel();
    const int64_t from = std::max(first, begin), to = std::min(last, begin + numel);
    if (from < to) runs.push_back({static_cast<int>(i), from - first, to - from, from - begin});
  }
  std::sort(runs.begin(), runs.end(),
            [](const ParameterRun& a, const ParameterRun& b) { return a.position < b.position; });
  return runs;
}

int64_t DataParallel::parameterBytes() const {
  const auto bytes = [](const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); };
  int64_t total = 0;
  for (const FlatSlab& slab : slabs_) {
    if (slab.param.defined()) total += bytes(slab.param);
  }
  for (const torch::Tensor& shard : param_shards_) total += bytes(shard);
  for (const torch::Tensor& slot : slots_) total += bytes(slot);
  return total;
}

}  // namespace dtrain
