#include "parallel/bucket_plan.h"

#include <algorithm>
#include <map>

namespace dtrain {

SlabPlan planSlabs(const std::vector<torch::Tensor>& params, double first_bucket_mb, double bucket_mb,
                   const std::vector<bool>& decayed, const std::vector<int>& unit_of_param) {
  SlabPlan plan;
  plan.bucket_of_param.assign(params.size(), -1);
  std::map<std::pair<torch::ScalarType, bool>, int> slab_of_group;
  for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) {
    const torch::ScalarType dtype = params[i].scalar_type();
    const bool decay = decayed.empty() || decayed[static_cast<size_t>(i)];
    auto [it, inserted] = slab_of_group.emplace(std::make_pair(dtype, decay), static_cast<int>(plan.slabs.size()));
    if (inserted) plan.slabs.push_back(SlabLayout{dtype, decay, 0, {}, {}});
    SlabLayout& slab = plan.slabs[it->second];
    const int64_t element = static_cast<int64_t>(c10::elementSize(dtype));
    const int64_t align = std::max<int64_t>(1, 16 / element);
    slab.numel = (slab.numel + align - 1) / align * align;
    slab.params.push_back(i);
    slab.offsets.push_back(slab.numel);
    slab.numel += params[i].numel();
  }
  // Slab order follows first appearance in registration order.
  std::vector<int> order(plan.slabs.size());
  for (size_t s = 0; s < plan.slabs.size(); ++s) order[s] = static_cast<int>(s);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return plan.slabs[a].params.back() < plan.slabs[b].params.back(); });
  std::vector<SlabLayout> sorted;
  for (int s : order) sorted.push_back(std::move(plan.slabs[s]));
  plan.slabs = std::move(sorted);

  for (size_t s = 0; s < plan.slabs.size(); ++s) {
    SlabLayout& slab = plan.slabs[s];
    const double element = static_cast<double>(c10::elementSize(slab.dtype));
    const size_t first_bucket = plan.buckets.size();
    Bucket current;
    current.slab = static_cast<int>(s);
    double current_bytes = 0;
    for (size_t k = 0; k < slab.params.size(); ++k) {
      const double cap_bytes = (plan.buckets.size() == first_bucket ? first_bucket_mb : bucket_mb) * 1024 * 1024;
      const double bytes = static_cast<double>(params[slab.params[k]].numel()) * element;
      const auto full = [&] {
        if (unit_of_param.empty()) return current_bytes + bytes > cap_bytes;
        return unit_of_param[static_cast<size_t>(slab.params[k])] !=
               unit_of_param[static_cast<size_t>(current.params.back())];
      };
      if (!current.params.empty() && full()) {
        current.numel = slab.offsets[k] - current.offset;
        plan.buckets.push_back(current);
        current = Bucket{static_cast<int>(s), slab.offsets[k], 0, {}};
        current_bytes = 0;
      }
      current.params.push_back(slab.params[k]);
      current_bytes += bytes;
    }
    current.numel = slab.numel - current.offset;
    plan.buckets.push_back(current);
  }
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    for (int p : plan.buckets[b].params) plan.bucket_of_param[p] = static_cast<int>(b);
  }
  return plan;
}

SlabPlan padBuckets(SlabPlan plan, int64_t multiple, std::vector<ShardPiece>& pieces) {
  pieces.clear();
  std::vector<int64_t> shift(plan.buckets.size(), 0);
  std::vector<int64_t> end_of_slab(plan.slabs.size(), 0);
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    Bucket& bucket = plan.buckets[b];
    int64_t& end = end_of_slab[static_cast<size_t>(bucket.slab)];
    const int64_t padded = (bucket.numel + multiple - 1) / multiple * multiple;
    pieces.push_back(ShardPiece{bucket.slab, end, padded, bucket.offset, bucket.numel});
    shift[b] = end - bucket.offset;
    bucket.offset = end;
    bucket.numel = padded;
    end += padded;
  }
  for (size_t s = 0; s < plan.slabs.size(); ++s) {
    SlabLayout& slab = plan.slabs[s];
    slab.numel = end_of_slab[s];
    for (size_t k = 0; k < slab.params.size(); ++k) {
      slab.offsets[k] += shift[static_cast<size_t>(plan.bucket_of_param[static_cast<size_t>(slab.params[k])])];
    }
  }
  return plan;
}

ShardSlices shardSlices(const std::vector<ShardPiece>& pieces, size_t slabs, int64_t world) {
  ShardSlices slices;
  slices.shard_numel.assign(slabs, 0);
  for (const ShardPiece& piece : pieces) {
    int64_t& numel = slices.shard_numel[static_cast<size_t>(piece.slab)];
    slices.position.push_back(numel);
    numel += piece.numel / world;
  }
  return slices;
}

}  // namespace dtrain
