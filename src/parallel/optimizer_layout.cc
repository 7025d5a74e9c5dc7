#include "parallel/optimizer_layout.h"

namespace dtrain {

std::unique_ptr<Optimizer> ReplicatedSlabs::makeOptimizer(DataParallel& dp, const OptimizerFactory& make,
                                                          std::chrono::milliseconds) const {
  return make(dp.slabs());
}

std::unique_ptr<Optimizer> ShardedSlabs::makeOptimizer(DataParallel& dp, const OptimizerFactory& make,
                                                       std::chrono::milliseconds timeout) const {
  std::vector<int64_t> logical;
  for (size_t i = 0; i < dp.slabs().size(); ++i) logical.push_back(dp.slabNumel(i));
  return makeShardedOptimizer(dp.slabs(), logical, dp.communicator(), make, timeout);
}

std::unique_ptr<Optimizer> ShardedBuckets::makeOptimizer(DataParallel& dp, const OptimizerFactory& make,
                                                         std::chrono::milliseconds timeout) const {
  return makeShardedOptimizer(dp.shardLayout(), dp.communicator(), make, timeout);
}

}  // namespace dtrain
