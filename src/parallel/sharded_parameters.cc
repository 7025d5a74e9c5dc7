#include "parallel/sharded_parameters.h"

#include <algorithm>
#include <unordered_map>

#include "comm/communicator.h"
#include "common/error.h"
#include "parallel/bucket_plan.h"
#include "parallel/tensor_buffer.h"
#include "parallel/unit_gather.h"

namespace dtrain {

ShardedParameters::ShardedParameters(std::vector<std::vector<torch::Tensor>> units, torch::ScalarType param_dtype,
                                     std::shared_ptr<Communicator> gather_comm, bool kept_units)
    : units_(std::move(units)),
      kept_units_(kept_units),
      param_dtype_(param_dtype),
      gather_comm_(std::move(gather_comm)) {
  if (param_dtype != torch::kFloat && param_dtype != torch::kBFloat16 && param_dtype != torch::kHalf) {
    throw ConfigError(std::string("DataParallel: param_dtype ") + c10::toString(param_dtype) +
                      "; expected Float, BFloat16 or Half");
  }
}

ShardedParameters::~ShardedParameters() = default;

std::vector<int> ShardedParameters::unitOfParameters(const std::vector<torch::Tensor>& params) {
  if (units_.empty()) {
    throw ConfigError("DataParallel: sharded parameters (ZeRO-3) need the model's units: a model with "
                      "sharding units (gpt2, llama) or DataParallelOptions::units");
  }
  std::unordered_map<const void*, int> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].unsafeGetTensorImpl()] = static_cast<int>(i);
  std::vector<int> unit_of(params.size(), -1);
  for (size_t u = 0; u < units_.size(); ++u) {
    for (const torch::Tensor& p : units_[u]) {
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
  for (size_t i = 0; i < params.size(); ++i) {
    if (unit_of[i] < 0) {
      throw ConfigError("DataParallel: a parameter of shape " + toString(params[i].sizes()) +
                        " is in none of the model's " + std::to_string(units_.size()) + " units");
    }
  }
  unit_of_param_ = unit_of;
  return unit_of;
}

void ShardedParameters::take(const SlabPlan& plan, FlatLayout& layout, const SyncContext& context, bool broadcast,
                             std::function<void()> on_backward_start) {
  torch::NoGradGuard no_grad;
  const torch::Device device = context.device();
  std::vector<torch::Tensor> full;
  for (const SlabLayout& slab_layout : plan.slabs) {
    torch::Tensor slab =
        torch::zeros({slab_layout.numel}, torch::TensorOptions().dtype(slab_layout.dtype).device(device));
    for (size_t k = 0; k < slab_layout.params.size(); ++k) {
      torch::Tensor& p = layout.params[static_cast<size_t>(slab_layout.params[k])];
      torch::Tensor view = slab.as_strided(p.sizes(), p.strides(), slab_layout.offsets[k]);
      view.copy_(p.detach());
      p.set_data(view);  // the parameter's own memory goes now, not after every slab is built
    }
    full.push_back(slab);
    layout.slabs.push_back(FlatSlab{torch::Tensor(), torch::Tensor(), slab_layout.weight_decay});
  }
  const int64_t world = context.comm->size(), rank = context.comm->rank();
  if (broadcast && world > 1) broadcastTensors(*context.comm, full, context.timeout);
  const ShardSlices slices = shardSlices(layout.pieces, full.size(), world);
  for (size_t s = 0; s < full.size(); ++s) master_shards_.push_back(torch::empty({slices.shard_numel[s]}, full[s].options()));
  for (size_t k = 0; k < layout.pieces.size(); ++k) {
    const ShardPiece& piece = layout.pieces[k];
    const size_t s = static_cast<size_t>(piece.slab);
    const int64_t slice = piece.numel / world;
    torch::Tensor master = master_shards_[s].narrow(0, slices.position[k], slice);
    master.copy_(full[s].narrow(0, piece.offset + rank * slice, slice));
    layout.master_slices.push_back(master);
  }
  full.clear();
  fillSlots(layout, device);

  std::vector<UnitGather::Unit> units(units_.size());
  for (size_t u = 0; u < units.size(); ++u) units[u].slot = slotOf(static_cast<int>(u));
  for (size_t b = 0; b < layout.buckets.size(); ++b) {
    UnitGather::Unit& unit = units[static_cast<size_t>(unit_of_bucket_[b])];
    unit.parts.push_back({layout.master_slices[b],
                          slots_[static_cast<size_t>(unit.slot)].narrow(0, place_[b], layout.buckets[b].numel)});
  }
  gather_ = UnitGather::create(std::move(units), gather_comm_ ? gather_comm_ : context.comm, context.timeout,
                               std::move(on_backward_start),
                               kept_units_ ? UnitGather::Residency::kKept : UnitGather::Residency::kPerUse);
}

int ShardedParameters::slotOf(int unit) const {
  if (kept_units_ || unit == 0) return unit;
  const int block_slots = std::min(2, static_cast<int>(units_.size()) - 1);
  return 1 + (unit - 1) % block_slots;
}

// Slot 0: the root's buckets; slots 1 and 2: the blocks', alternating (or
// a slot per unit, kept).
// Each unit's buckets get their place in its slot, and the parameters
// become views into the slots.
void ShardedParameters::fillSlots(const FlatLayout& layout, torch::Device device) {
  const int unit_count = static_cast<int>(units_.size());
  unit_of_bucket_.resize(layout.buckets.size());
  place_.assign(layout.buckets.size(), 0);
  std::vector<int64_t> unit_numel(units_.size(), 0);
  for (size_t b = 0; b < layout.buckets.size(); ++b) {
    unit_of_bucket_[b] = unit_of_param_[static_cast<size_t>(layout.buckets[b].params[0])];
    int64_t& numel = unit_numel[static_cast<size_t>(unit_of_bucket_[b])];
    place_[b] = numel;
    numel += layout.buckets[b].numel;
  }
  int slot_count = 0;
  for (int u = 0; u < unit_count; ++u) slot_count = std::max(slot_count, slotOf(u) + 1);
  std::vector<int64_t> slot_numel(static_cast<size_t>(slot_count), 0);
  for (int u = 0; u < unit_count; ++u) {
    int64_t& numel = slot_numel[static_cast<size_t>(slotOf(u))];
    numel = std::max(numel, unit_numel[static_cast<size_t>(u)]);
  }
  for (int64_t numel : slot_numel) {
    slots_.push_back(torch::zeros({numel}, torch::TensorOptions().dtype(param_dtype_).device(device)));
  }
  for (size_t i = 0; i < layout.params.size(); ++i) {
    torch::Tensor p = layout.params[i];
    const size_t b = static_cast<size_t>(layout.bucket_of_param[i]);
    const int64_t offset = place_[b] + layout.param_offset[i] - layout.buckets[b].offset;
    p.set_data(slots_[static_cast<size_t>(slotOf(unit_of_param_[i]))].as_strided(p.sizes(), p.strides(), offset));
    p.mutable_grad() = torch::Tensor();
  }
}

models::UnitHooks* ShardedParameters::hooks() const { return gather_.get(); }

void ShardedParameters::published() { gather_->invalidate(); }

std::vector<torch::Tensor> ShardedParameters::fullParameters(const FlatLayout& layout,
                                                             const SyncContext& context) const {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> full;
  for (size_t s = 0; s < layout.slabs.size(); ++s) {
    full.push_back(torch::zeros({layout.padded_numel[s]}, master_shards_[s].options()));
  }
  AllgatherOptions options;
  options.timeout = context.timeout;
  for (size_t k = 0; k < layout.pieces.size(); ++k) {
    const ShardPiece& piece = layout.pieces[k];
    const torch::Tensor whole = full[static_cast<size_t>(piece.slab)].narrow(0, piece.offset, piece.numel);
    void* stream = currentStreamOf(whole);
    auto work = context.comm->allgather(bufferOf(layout.master_slices[k], stream), bufferOf(whole, stream), options);
    if (!whole.is_cuda()) work->wait(context.timeout);
  }
  std::vector<torch::Tensor> values;
  for (size_t i = 0; i < layout.params.size(); ++i) {
    const torch::Tensor& p = layout.params[i];
    const size_t s = static_cast<size_t>(layout.buckets[static_cast<size_t>(layout.bucket_of_param[i])].slab);
    values.push_back(full[s].as_strided(p.sizes(), p.strides(), layout.param_offset[i]));
  }
  return values;
}

void ShardedParameters::load(const FlatLayout& layout, int64_t rank, int64_t world,
                             const std::vector<torch::Tensor>& values) {
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < layout.pieces.size(); ++k) {
    const ShardPiece& piece = layout.pieces[k];
    const int64_t begin = piece.offset + rank * (piece.numel / world), end = begin + piece.numel / world;
    const torch::Tensor& slice = layout.master_slices[k];
    slice.zero_();
    // The parameters of this piece's bucket that overlap this rank's slice.
    for (int i : layout.buckets[k].params) {
      const size_t param = static_cast<size_t>(i);
      const int64_t first = layout.param_offset[param], last = first + layout.params[param].numel();
      const int64_t from = std::max(first, begin), to = std::min(last, end);
      if (from >= to) continue;
      const torch::Tensor flat = values[param].reshape({-1}).to(slice.device(), slice.scalar_type());
      slice.narrow(0, from - begin, to - from).copy_(flat.narrow(0, from - first, to - from));
    }
  }
  published();
}

int64_t ShardedParameters::bytes() const {
  int64_t total = 0;
  for (const torch::Tensor& shard : master_shards_) total += shard.numel() * static_cast<int64_t>(shard.element_size());
  for (const torch::Tensor& slot : slots_) total += slot.numel() * static_cast<int64_t>(slot.element_size());
  return total;
}

}  // namespace dtrain
