#include "bench/device_memory.h"

#include <cstdlib>
#include <cstring>

#include "common/error.h"

#ifdef DTRAIN_HAVE_NCCL
#include "bench/cuda_runtime.h"
#endif

namespace dtrain::bench {

DeviceMemory::DeviceMemory(Device device, size_t bytes) : device_(device), bytes_(bytes) {
  size_t alloc = bytes == 0 ? 1 : bytes;
  if (device.type == DeviceType::kCpu) {
    data_ = std::aligned_alloc(4096, (alloc + 4095) / 4096 * 4096);
    if (data_ == nullptr) throw IoError("could not allocate " + std::to_string(bytes) + " host bytes");
    return;
  }
#ifdef DTRAIN_HAVE_NCCL
  DTRAIN_BENCH_CUDA(requireCudaRuntime().malloc(&data_, alloc));
#else
  throw ConfigError("this dtrain was built without CUDA; CUDA buffers are unavailable");
#endif
}

DeviceMemory::~DeviceMemory() {
  if (data_ == nullptr) return;
  if (device_.type == DeviceType::kCpu) {
    std::free(data_);
    return;
  }
#ifdef DTRAIN_HAVE_NCCL
  if (const CudaRuntime* cuda = cudaRuntime()) cuda->free(data_);
#endif
}

void DeviceMemory::upload(const std::vector<unsigned char>& host) {
  size_t n = std::min(host.size(), bytes_);
  if (device_.type == DeviceType::kCpu) {
    std::memcpy(data_, host.data(), n);
    return;
  }
#ifdef DTRAIN_HAVE_NCCL
  DTRAIN_BENCH_CUDA(requireCudaRuntime().memcpy(data_, host.data(), n, cudaMemcpyHostToDevice));
#endif
}

std::vector<unsigned char> DeviceMemory::download(size_t bytes) const {
  std::vector<unsigned char> host(std::min(bytes, bytes_));
  if (device_.type == DeviceType::kCpu) {
    std::memcpy(host.data(), data_, host.size());
    return host;
  }
#ifdef DTRAIN_HAVE_NCCL
  DTRAIN_BENCH_CUDA(requireCudaRuntime().memcpy(host.data(), data_, host.size(), cudaMemcpyDeviceToHost));
#endif
  return host;
}

int cudaDeviceCount() {
#ifdef DTRAIN_HAVE_NCCL
  const CudaRuntime* cuda = cudaRuntime();  // not installed: no CUDA device
  int count = 0;
  if (cuda == nullptr || cuda->getDeviceCount(&count) != cudaSuccess) return 0;
  return count;
#else
  return 0;
#endif
}

void selectCudaDevice(int index) {
#ifdef DTRAIN_HAVE_NCCL
  int count = cudaDeviceCount();
  if (index < 0 || index >= count) {
    throw ConfigError("CUDA device " + std::to_string(index) + " does not exist; this process sees " +
                      std::to_string(count) + " (check LOCAL_RANK and CUDA_VISIBLE_DEVICES)");
  }
  DTRAIN_BENCH_CUDA(requireCudaRuntime().setDevice(index));
#else
  throw ConfigError("this dtrain was built without CUDA/NCCL; use --backend gloo");
#endif
}

void synchronize(Device device) {
#ifdef DTRAIN_HAVE_NCCL
  if (device.type == DeviceType::kCuda) DTRAIN_BENCH_CUDA(requireCudaRuntime().deviceSynchronize());
#endif
}

std::string deviceDescription(Device device) {
  if (device.type == DeviceType::kCpu) return "cpu";
#ifdef DTRAIN_HAVE_NCCL
  cudaDeviceProp prop{};
  const CudaRuntime* cuda = cudaRuntime();
  if (cuda != nullptr && cuda->getDeviceProperties(&prop, device.index) == cudaSuccess) {
    char bus[32];
    std::snprintf(bus, sizeof(bus), "[0x%02x]", prop.pciBusID);
    return "device " + std::to_string(device.index) + " " + bus + " " + prop.name;
  }
#endif
  return "cuda:" + std::to_string(device.index);
}

std::string deviceName(Device device) {
  if (device.type == DeviceType::kCpu) return "cpu";
#ifdef DTRAIN_HAVE_NCCL
  cudaDeviceProp prop{};
  const CudaRuntime* cuda = cudaRuntime();
  if (cuda != nullptr && cuda->getDeviceProperties(&prop, device.index) == cudaSuccess) return prop.name;
#endif
  return "cuda:" + std::to_string(device.index);
}

}  // namespace dtrain::bench
