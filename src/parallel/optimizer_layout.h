// OptimizerLayout: how the optimizer's state lies across the data-parallel
// ranks (private to parallel/; parallelize() picks one from the plan).
//
//   ReplicatedSlabs (replicated, as DDP): every rank's optimizer updates
//     every slab (makeOptimizer's `make` over dp.slabs()).
//   ShardedSlabs (ZeRO-1): DataParallel pads each slab to a multiple of
//     64 x N elements (slabMultiple) and rank r's optimizer owns the r-th
//     contiguous 1/N of every slab; after its update the slices are
//     all-gathered in place (makeShardedOptimizer over the slabs).
//   ShardedBuckets (ZeRO-2 and ZeRO-3): rank r's optimizer owns its slice
//     of every bucket, the gradient shards the reduce-scatters fill
//     (makeShardedOptimizer over dp.shardLayout()); ZeRO-2 all-gathers the
//     slices after the update, ZeRO-3 publishes them to the unit gathers.
//
// Contract:
// - slabMultiple(world) is what DataParallelOptions::slab_multiple must be
//   for the layout; parallelize() sets it before the DataParallel exists.
// - makeOptimizer(dp, make, timeout) builds, once, the optimizer over this
//   rank's part of dp's parameters, `make` making the per-rank optimizer
//   (SGD, AdamW) over the slices it is given. Every layout's optimizer
//   saves and loads its state in the unsharded layout (optim.h), so a
//   checkpoint moves between layouts. The optimizer must not outlive dp.
// - ShardedBuckets needs a DataParallel whose gradients are sharded
//   (ConfigError otherwise).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "dtrain/data_parallel.h"
#include "dtrain/optim.h"

namespace dtrain {

// Makes an optimizer over the slabs (or slices) given.
using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(std::vector<FlatSlab>)>;

class OptimizerLayout {
 public:
  virtual ~OptimizerLayout() = default;
  virtual int64_t slabMultiple(int64_t world) const { return 1; }
  virtual std::unique_ptr<Optimizer> makeOptimizer(DataParallel& dp, const OptimizerFactory& make,
                                                   std::chrono::milliseconds timeout) const = 0;
};

class ReplicatedSlabs : public OptimizerLayout {
 public:
  std::unique_ptr<Optimizer> makeOptimizer(DataParallel& dp, const OptimizerFactory& make,
                                           std::chrono::milliseconds timeout) const override;
};

class ShardedSlabs : public OptimizerLayout {
 public:
  int64_t slabMultiple(int64_t world) const override { return int64_t{64} * world; }
  std::unique_ptr<Optimizer> makeOptimizer(DataParallel& dp, const OptimizerFactory& make,
                                           std::chrono::milliseconds timeout) const override;
};

class ShardedBuckets : public OptimizerLayout {
 public:
  std::unique_ptr<Optimizer> makeOptimizer(DataParallel& dp, const OptimizerFactory& make,
                                           std::chrono::milliseconds timeout) const override;
};

}  // namespace dtrain
