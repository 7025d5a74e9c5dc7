// parallelize(): a ParallelPlan applied to a model that knows nothing of
// it, as composable pieces (torchtitan's parallelize_llama / apply_fsdp
// and PyTorch's composable fully_shard have this shape; the code is ours).
// What dtrain's jobs train with; library users may build a DataParallel
// themselves (dtrain/data_parallel.h).
//
//   ParallelizeOptions options;
//   options.make_optimizer = [&](std::vector<FlatSlab> s) { return makeAdamW(std::move(s), adamw); };
//   ParallelModel parallel = parallelize(model, plan, ctx.communicator(), options);
//   ... model->loss(x, y).backward(); parallel.optimizer->step(); ...
//
// The pieces, chosen once from the plan's ShardStage:
//
//   stage       gradient sync (grad_sync.h)  parameters               optimizer layout
//   none        AllReduceBuckets             replicated               ReplicatedSlabs
//   optimizer   AllReduceBuckets             replicated               ShardedSlabs (ZeRO-1)
//   gradients   ReduceScatterBuckets         replicated               ShardedBuckets (ZeRO-2)
//   full        ReduceScatterBuckets         ShardedParameters        ShardedBuckets (ZeRO-3)
//
// composed as: the optimizer layout says how the slabs are padded, the
// DataParallel facade is built over the model from the gradient piece and
// (present or absent) the parameter sharding, then the optimizer layout
// makes the optimizer over the DataParallel's slabs or shards.
//
// Contract:
// - The model is passed as what it is (a models::Model): parallelize
//   reads its trainable parameters, its no-weight-decay parameters and
//   (ZeRO-3) its sharding units, and sets its unit hooks for as long as the
//   returned DataParallel lives. The model itself has no flag to set.
// - `comm` is the data-parallel group; the plan's data-parallel size
//   (dp_replicate x dp_shard) must be its size, and the plan must have no
//   pipeline dimension yet (ConfigError otherwise). With tp > 1 the model
//   is already split (TensorParallelModel): the data-parallel pieces see
//   this rank's parts as the parameters, and the ranks of `comm` hold the
//   same parts. Hybrid sharding (dp_replicate > 1 with a --shard stage):
//   `comm` is the dp_shard group, the stage shards over it, and the caller
//   all-reduces what each rank holds of the gradients across the replicas
//   after backward (TrainStepOptions::replica_communicator).
// - Construction is collective on `comm`: rank 0's parameters and buffers
//   are broadcast (ZeRO-3: each rank keeps its slices of them);
//   options.gather_communicator is called (on every rank) only for ZeRO-3.
// - ParallelModel's optimizer goes before its DataParallel (member order):
//   the sharded optimizers keep references into it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include <torch/torch.h>

#include "dtrain/data_parallel.h"
#include "dtrain/optim.h"
#include "models/model.h"
#include "parallel/optimizer_layout.h"
#include "parallel/parallel_plan.h"

namespace dtrain {

struct ParallelizeOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  // ZeRO-3: the dtype the gathered parameters compute in (float32, or the
  // job's bf16/fp16); the master shards stay float32.
  torch::ScalarType param_dtype = torch::kFloat;
  // ZeRO-3: a communicator over the same ranks for the parameter gathers
  // (empty, or returning null: the gathers share `comm`; on CUDA give one,
  // so gathers and reduce-scatters never order each other).
  std::function<std::shared_ptr<Communicator>()> gather_communicator;
  // The per-rank optimizer over the slabs or slices it is given (required).
  OptimizerFactory make_optimizer;
};

// What a job trains with. Members go in reverse: the optimizer first.
struct ParallelModel {
  std::unique_ptr<DataParallel> data_parallel;
  std::unique_ptr<Optimizer> optimizer;
};

ParallelModel parallelize(const std::shared_ptr<models::Model>& model, const ParallelPlan& plan,
                          std::shared_ptr<Communicator> comm, const ParallelizeOptions& options);

// The optimizer layout of a plan's stage (what parallelize uses).
std::unique_ptr<OptimizerLayout> optimizerLayoutFor(ShardStage stage);

}  // namespace dtrain
