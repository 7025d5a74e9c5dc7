// ShardedParameters: ZeRO-3's parameter sharding (FSDP's FULL_SHARD of the
// parameters; private to parallel/). A DataParallel has this piece when
// its parameters are sharded and none otherwise; its gradients then go
// through ReduceScatterBuckets and its optimizer over shardLayout().
//
// Contract:
// - The model is cut into units (unit 0 the root: embeddings, final norm
//   and head; then one per block), given explicitly (a models::Model's
//   shardingUnits(), or DataParallelOptions::units). unitOfParameters()
//   places every trainable parameter in exactly one unit (ConfigError
//   otherwise, or when there are no units); the buckets are then the
//   units' runs of parameters in each slab (planSlabs), padded as the
//   gradients' piece asks.
// - take() runs once, in construction: the full slabs exist only there,
//   long enough to start every rank from rank 0's values (a broadcast
//   when asked) and cut rank r's r-th 1/N of each bucket out of them as its
//   master copy (one master shard per slab, in the slab's dtype;
//   FlatLayout::master_slices are its views per bucket). The parameters
//   become views into preallocated slots of param_dtype (unit 0 has a slot
//   of its own, the blocks share two; with kept units every unit has its
//   own), their .grad undefined; the slabs keep neither parameters nor
//   gradients.
// - hooks() (UnitGather, unit_gather.h) is what the model calls around its
//   units: a unit's slot is all-gathered from the master slices just
//   before its forward and its backward, the next unit's issued ahead, on
//   `gather_comm` (a communicator of its own on CUDA, so the gathers and
//   the reduce-scatters never order each other) and a stream of its own.
//   Unit 0's hook on the loss calls on_backward_start.
// - published(): the master slices changed (an optimizer step, a load);
//   every unit is gathered again at its next use.
// - fullParameters() (a collective every rank calls) gathers every
//   parameter's value as float32 tensors; load() keeps this rank's
//   slices of the values given and publishes them.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "parallel/grad_sync.h"

namespace models {
class UnitHooks;
}

namespace dtrain {

class UnitGather;
struct SlabPlan;

class ShardedParameters {
 public:
  // ConfigError unless param_dtype is float32, bfloat16 or float16.
  // kept_units: every unit has a slot of its own and stays gathered until
  // the shards change (UnitGather's kKept: a pipeline stage's units).
  ShardedParameters(std::vector<std::vector<torch::Tensor>> units, torch::ScalarType param_dtype,
                    std::shared_ptr<Communicator> gather_comm, bool kept_units = false);
  ~ShardedParameters();

  // Which unit each of `params` is in (see the contract).
  std::vector<int> unitOfParameters(const std::vector<torch::Tensor>& params);
  // Moves the parameters of `plan` (padded) into master shards and slots;
  // fills layout.slabs and layout.master_slices.
  void take(const SlabPlan& plan, FlatLayout& layout, const SyncContext& context, bool broadcast,
            std::function<void()> on_backward_start);

  models::UnitHooks* hooks() const;
  void published();
  std::vector<torch::Tensor> fullParameters(const FlatLayout& layout, const SyncContext& context) const;
  void load(const FlatLayout& layout, int64_t rank, int64_t world, const std::vector<torch::Tensor>& values);
  // Bytes of parameters this rank holds: the master shards and the slots.
  int64_t bytes() const;

 private:
  void fillSlots(const FlatLayout& layout, torch::Device device);
  int slotOf(int unit) const;
  std::vector<std::vector<torch::Tensor>> units_;
  bool kept_units_ = false;
  torch::ScalarType param_dtype_;
  std::shared_ptr<Communicator> gather_comm_;
  std::vector<int> unit_of_param_;
  std::vector<torch::Tensor> master_shards_;  // per slab
  std::vector<torch::Tensor> slots_;
  std::shared_ptr<UnitGather> gather_;
  // Per bucket: its unit and its place in its unit's slot.
  std::vector<int> unit_of_bucket_;
  std::vector<int64_t> place_;
};

}  // namespace dtrain
