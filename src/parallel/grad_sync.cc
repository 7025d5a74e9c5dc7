#include "parallel/grad_sync.h"

namespace dtrain {

std::vector<int> GradSync::launchOrder(const std::vector<Bucket>& buckets) const {
  std::vector<int> order(buckets.size());
  for (size_t b = 0; b < buckets.size(); ++b) order[b] = static_cast<int>(b);
  return order;
}

const std::vector<FlatSlab>& GradSync::shards() const {
  static const std::vector<FlatSlab> none;
  return none;
}

void* SyncContext::commStream() const {
#if DTRAIN_TORCH_CUDA
  if (cuda) return streams->comm->stream();
#endif
  return nullptr;
}

torch::Device SyncContext::device() const {
  if (cuda) return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device_index));
  return torch::kCPU;
}

}  // namespace dtrain
