// Test-side CUDA helpers: a device allocation holding host-computed values,
// copied with plain cudaMemcpy (no kernels), and checks that throw with a
// message for the child process to print.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/dtype_values.h"
#include "comm/types.h"

namespace dtrain::testing {

inline void cudaOrThrow(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(rc));
}

inline void expectThat(bool condition, const std::string& message) {
  if (!condition) throw std::runtime_error(message);
}

// Throws naming `what` and the first element off by more than `tolerance`
// (relative, 0: exact).
inline void expectValues(const std::vector<double>& got, const std::vector<double>& want, double tolerance,
                         const std::string& what) {
  expectThat(got.size() == want.size(), what + ": compared sizes differ");
  for (size_t i = 0; i < got.size(); ++i) {
    const double allowed = tolerance * std::max(1.0, std::fabs(want[i]));
    if (std::fabs(got[i] - want[i]) > allowed) {
      throw std::runtime_error(what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                               ", expected " + std::to_string(want[i]));
    }
  }
}

// Host bytes of `count` elements of `dtype`, filled from doubles.
inline std::vector<char> hostValues(DType dtype, const std::vector<double>& values) {
  std::vector<char> bytes(values.size() * dtypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) storeElement(bytes.data(), i, dtype, values[i]);
  return bytes;
}

class DeviceBuffer {
 public:
  DeviceBuffer(DType dtype, size_t count, int device) : dtype_(dtype), count_(count), device_(device) {
    cudaOrThrow(cudaMalloc(&data_, bytes() == 0 ? 1 : bytes()), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  size_t bytes() const { return count_ * dtypeSize(dtype_); }
  void* data() const { return data_; }
  // A Buffer of `count` elements starting `offset` elements in.
  Buffer view(size_t offset, size_t count, void* stream = nullptr) const {
    Buffer buffer;
    buffer.data = static_cast<char*>(data_) + offset * dtypeSize(dtype_);
    buffer.count = count;
    buffer.dtype = dtype_;
    buffer.device = Device::cuda(device_);
    buffer.stream = stream;
    return buffer;
  }
  Buffer all(void* stream = nullptr) const { return view(0, count_, stream); }

  void upload(const std::vector<double>& values, size_t offset = 0) {
    const std::vector<char> bytes = hostValues(dtype_, values);
    cudaOrThrow(cudaMemcpy(static_cast<char*>(data_) + offset * dtypeSize(dtype_), bytes.data(), bytes.size(),
                           cudaMemcpyHostToDevice),
                "cudaMemcpy to device");
  }
  std::vector<double> download(size_t offset, size_t count) const {
    std::vector<char> bytes(count * dtypeSize(dtype_));
    cudaOrThrow(cudaMemcpy(bytes.data(), static_cast<char*>(data_) + offset * dtypeSize(dtype_), bytes.size(),
                           cudaMemcpyDeviceToHost),
                "cudaMemcpy to host");
    std::vector<double> values(count);
    for (size_t i = 0; i < count; ++i) values[i] = loadElement(bytes.data(), i, dtype_);
    return values;
  }
  std::vector<double> download() const { return download(0, count_); }

 private:
  DType dtype_;
  size_t count_;
  int device_;
  void* data_ = nullptr;
};

}  // namespace dtrain::testing
