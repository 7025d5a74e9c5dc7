// Benchmark buffers on the host or on a CUDA device. The only place bench/
// touches the CUDA runtime, so the rest builds without it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "comm/types.h"

namespace dtrain::bench {

// Owns `bytes` bytes on `device` (page-aligned host memory or cudaMalloc).
class DeviceMemory {
 public:
  DeviceMemory(Device device, size_t bytes);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  void upload(const std::vector<unsigned char>& host);
  std::vector<unsigned char> download(size_t bytes) const;

 private:
  Device device_;
  size_t bytes_;
  void* data_ = nullptr;
};

// Selects the CUDA device for this process; ConfigError when CUDA is not
// built in or the index is out of range.
void selectCudaDevice(int index);
int cudaDeviceCount();  // 0 when CUDA is not built in or no driver
// Blocks until all work on the device has finished (no-op for the CPU).
void synchronize(Device device);
std::string deviceDescription(Device device);
// "cpu", or the CUDA device's product name ("NVIDIA H100 80GB HBM3").
std::string deviceName(Device device);

}  // namespace dtrain::bench
