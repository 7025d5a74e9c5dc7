#include "train/device_memory_stats.h"

#include "train/train_settings.h"

#include "common/env.h"
#include "common/host_memory.h"

#include <algorithm>
#include <vector>

#if DTRAIN_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace dtrain {
namespace {

// cudaMemGetInfo of the device: {free, total}.
std::pair<int64_t, int64_t> memoryInfo(const torch::Device& device) {
#if DTRAIN_TORCH_CUDA
  if (device.is_cuda()) {
    const c10::cuda::CUDAGuard guard(device.index());
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      return {static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
    }
  }
#else
  (void)device;
#endif
  return {0, 0};
}

}  // namespace

int64_t peakAllocatedBytes(const torch::Device& device) {
#if DTRAIN_TORCH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[0].peak;  // [0]: StatType::AGGREGATE (its namespace moved in 2.x)
  }
#else
  (void)device;
#endif
  return 0;
}

void resetPeakAllocated(const torch::Device& device) {
#if DTRAIN_TORCH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#else
  (void)device;
#endif
}

int64_t deviceFreeBytes(const torch::Device& device) { return memoryInfo(device).first; }

int64_t plannedDeviceBytes(const torch::Device& device) {
  const int64_t setting = deviceMemorySetting();
  if (setting > 0) return setting;
  if (device.is_cpu()) return hostMemory().available / localRanks();
  return deviceFreeBytes(device);
}

int64_t localRanks() { return envInt("LOCAL_WORLD_SIZE", 1, 1 << 20).value_or(1); }

std::string plannedMemoryName(const torch::Device& device, const std::string& device_name) {
  if (deviceMemorySetting() > 0 || !device.is_cpu()) return device_name;
  const int64_t ranks = localRanks();
  return "this host's memory, " + describeHostMemory(hostMemory()) +
         (ranks > 1 ? ", shared by its " + std::to_string(ranks) + " ranks" : std::string());
}
int64_t deviceTotalBytes(const torch::Device& device) { return memoryInfo(device).second; }

double maxOverRanks(Context& ctx, double value) {
  std::vector<double> slots(static_cast<size_t>(ctx.size()), 0.0);
  slots[static_cast<size_t>(ctx.rank())] = value;
  ctx.allreduceSum(slots);
  return *std::max_element(slots.begin(), slots.end());
}

}  // namespace dtrain
