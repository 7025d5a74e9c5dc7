// What a straggler report says of the rank's machine (private to train/):
// its host and its GPU as the rank sees them now, read on the rank itself
// (NVML reads the local GPUs only).
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace dtrain {

// "host node7, GPU 3 NVIDIA H200 (GPU-5c1d...), SM clock 1410 MHz of 1980,
// throttled: power cap, thermal" on CUDA (NVML through gpu/nvml.h; what
// NVML cannot read is said so), "host node7, no GPU (CPU)" on the CPU.
std::string describeRankDevice(torch::Device device);

// The clock event (throttle) reasons of an NVML bitmask that slow a GPU
// down, in words: "power cap", "thermal", "HW slowdown", "power brake";
// "none" when none of those is set.
std::string slowdownReasons(uint64_t mask);

}  // namespace dtrain
