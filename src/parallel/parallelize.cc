#include "parallel/parallelize.h"

#include "comm/communicator.h"
#include "common/error.h"
#include "parallel/all_reduce_buckets.h"
#include "parallel/data_parallel_impl.h"
#include "parallel/reduce_scatter_buckets.h"
#include "parallel/sharded_parameters.h"

namespace dtrain {
namespace {

void checkPlan(const ParallelPlan& plan, const Communicator& comm, const ParallelizeOptions& options) {
  const bool hybrid = plan.dp_replicate > 1 && plan.shard != ShardStage::kNone;
  const int expected = hybrid ? plan.dp_shard : plan.dp_replicate * plan.dp_shard;
  if (expected != comm.size()) {
    throw ConfigError("parallelize: the plan's " + std::string(hybrid ? "dp_shard group" : "data-parallel size") +
                      " is " + std::to_string(expected) + " ranks, the communicator has " +
                      std::to_string(comm.size()));
  }
  if (!options.make_optimizer) throw ConfigError("parallelize: ParallelizeOptions::make_optimizer is empty");
}

std::unique_ptr<GradSync> gradSyncFor(const ParallelPlan& plan) {
  switch (plan.shard) {
    case ShardStage::kNone:
    case ShardStage::kOptimizer: return std::make_unique<AllReduceBuckets>();
    case ShardStage::kGradients:
    case ShardStage::kFull: break;
  }
  return std::make_unique<ReduceScatterBuckets>(plan.reduce_dtype == ReduceDtype::kBf16 ? torch::kBFloat16
                                                                                        : torch::kFloat);
}

std::unique_ptr<ShardedParameters> shardedParametersFor(const ParallelPlan& plan, models::Model& model,
                                                        const ParallelizeOptions& options) {
  if (plan.shard != ShardStage::kFull) return nullptr;
  std::shared_ptr<Communicator> gather = options.gather_communicator ? options.gather_communicator() : nullptr;
  // A pipeline stage's units stay gathered through the step: its
  // micro-batches' forwards and backwards interleave.
  return std::make_unique<ShardedParameters>(model.shardingUnits(), options.param_dtype, std::move(gather),
                                             /*kept_units=*/plan.pp > 1);
}

}  // namespace

std::unique_ptr<OptimizerLayout> optimizerLayoutFor(ShardStage stage) {
  switch (stage) {
    case ShardStage::kNone: return std::make_unique<ReplicatedSlabs>();
    case ShardStage::kOptimizer: return std::make_unique<ShardedSlabs>();
    case ShardStage::kGradients:
    case ShardStage::kFull: break;
  }
  return std::make_unique<ShardedBuckets>();
}

ParallelModel parallelize(const std::shared_ptr<models::Model>& model, const ParallelPlan& plan,
                          std::shared_ptr<Communicator> comm, const ParallelizeOptions& options) {
  if (!model) throw ConfigError("parallelize: the model is null");
  if (!comm) throw ConfigError("parallelize: the communicator is null");
  checkPlan(plan, *comm, options);
  const std::unique_ptr<OptimizerLayout> optimizer_layout = optimizerLayoutFor(plan.shard);
  DataParallelOptions dp_options;
  dp_options.bucket_mb = plan.bucket_mb;
  dp_options.first_bucket_mb = plan.first_bucket_mb;
  dp_options.timeout = options.timeout;
  dp_options.no_weight_decay = model->noWeightDecayParameters();
  dp_options.slab_multiple = optimizer_layout->slabMultiple(comm->size());
  dp_options.model = model.get();
  DataParallelPieces pieces;
  pieces.grad_sync = gradSyncFor(plan);
  pieces.sharded_parameters = shardedParametersFor(plan, *model, options);
  ParallelModel parallel;
  parallel.data_parallel =
      std::make_unique<DataParallel>(model, std::move(comm), std::move(dp_options), std::move(pieces));
  parallel.optimizer = optimizer_layout->makeOptimizer(*parallel.data_parallel, options.make_optimizer, options.timeout);
  return parallel;
}

}  // namespace dtrain
