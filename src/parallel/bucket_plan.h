// The layout of DataParallel's flat slabs and the bucket plan over them
// (private to parallel/ and train/).
//
// Parameters are grouped by dtype and weight-decay group (one slab each, in
// order of first appearance); inside a slab they lie in reverse
// registration order, which
// is roughly the order backward produces their gradients. Each parameter
// starts at a 16-byte boundary. Buckets tile each slab without gaps: a
// bucket takes whole parameters until adding the next would pass its cap
// (the first bucket of a slab: first_bucket_mb, then bucket_mb); a
// parameter larger than the cap gets a bucket of its own.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "dtrain/data_parallel.h"

namespace dtrain {

struct SlabLayout {
  torch::ScalarType dtype = torch::kFloat;
  bool weight_decay = true;
  int64_t numel = 0;             // including alignment padding
  std::vector<int> params;       // indices into the parameter list, in slab order
  std::vector<int64_t> offsets;  // element offset of each, same order
};

struct SlabPlan {
  std::vector<SlabLayout> slabs;
  std::vector<Bucket> buckets;       // slab 0's buckets, then slab 1's, ...
  std::vector<int> bucket_of_param;  // indexed like the parameter list
};

// `decayed[i]`: whether params[i] is weight-decayed (empty: all are).
// `unit_of_param[i]` (ZeRO-3; empty: none): the unit params[i] belongs to;
// then buckets are the longest runs of one unit's parameters in a slab,
// whatever their size, and the caps do not apply.
SlabPlan planSlabs(const std::vector<torch::Tensor>& params, double first_bucket_mb, double bucket_mb,
                   const std::vector<bool>& decayed = {}, const std::vector<int>& unit_of_param = {});

// The same plan with every bucket's numel rounded up to a multiple of
// `multiple` by zero padding after it, the buckets (and their parameters)
// moved up to make room: what ZeRO-2 splits evenly across ranks. Within a
// bucket nothing moves. `pieces` gets one entry per bucket: where it lies
// now and where it lay in `plan` (the unsharded layout checkpoints keep).
// `multiple` must keep parameters aligned (a multiple of 16 bytes).
SlabPlan padBuckets(SlabPlan plan, int64_t multiple, std::vector<ShardPiece>& pieces);

// Where each rank keeps its 1/world slice of every piece: a slab's shard
// holds the slices of its pieces in order; position[k] is piece k's slice's
// offset in its slab's shard, shard_numel[s] slab s's shard length.
struct ShardSlices {
  std::vector<int64_t> position;
  std::vector<int64_t> shard_numel;
};
ShardSlices shardSlices(const std::vector<ShardPiece>& pieces, size_t slabs, int64_t world);

}  // namespace dtrain
