// The training device's memory as the job sees it (private to train/):
// what PyTorch's caching allocator handed out, and what the device has.
// All 0 on the CPU.
#pragma once

#include <cstdint>

#include <torch/types.h>

#include "dtrain/init.h"

namespace dtrain {

// The most memory the caching allocator handed out to tensors since the
// start or the last resetPeakAllocated(): torch.cuda.max_memory_allocated().
int64_t peakAllocatedBytes(const torch::Device& device);
void resetPeakAllocated(const torch::Device& device);
// Free and total bytes of the device (cudaMemGetInfo), 0 on the CPU.
int64_t deviceFreeBytes(const torch::Device& device);
int64_t deviceTotalBytes(const torch::Device& device);
// What a job may plan to use on the device: DTRAIN_DEVICE_MEMORY_BYTES when
// set, else the GPU's free bytes, or on the CPU this rank's share of what
// the host has available (common/host_memory.h; the LOCAL_WORLD_SIZE ranks
// of the host share it).
int64_t plannedDeviceBytes(const torch::Device& device);
// The ranks on this host (LOCAL_WORLD_SIZE, else 1).
int64_t localRanks();
// What plannedDeviceBytes measured, for a refusal: the GPU's name, or on
// the CPU the host's memory in words.
std::string plannedMemoryName(const torch::Device& device, const std::string& device_name);
// The largest of one value per rank (a collective: every rank calls it).
double maxOverRanks(Context& ctx, double value);

}  // namespace dtrain
