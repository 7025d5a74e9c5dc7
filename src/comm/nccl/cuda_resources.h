// Small RAII owners for the CUDA objects the NCCL backend holds, and a scoped
// current-device switch. Destructors never throw: a CUDA runtime that is
// already shutting down (process exit) returns errors we can only ignore.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "gpu/cuda_check.h"

namespace dtrain {

// Makes `device` current for the scope and restores the previous device, so
// a caller thread working on another GPU is left as it was. Only switches
// when needed: cudaSetDevice is cheap but not free on the hot path.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device) {
    DTRAIN_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) {
      DTRAIN_CUDA_CHECK(cudaSetDevice(device));
    } else {
      previous_ = -1;
    }
  }
  ~CudaDeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// A stream that never synchronizes implicitly with the legacy default stream;
// ordering with callers is explicit, through events.
class CudaStream {
 public:
  CudaStream() { DTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~CudaStream() { cudaStreamDestroy(stream_); }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Events only order and signal; timing is disabled because it costs a
// device-side timestamp per record.
class CudaEvent {
 public:
  CudaEvent() { DTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~CudaEvent() { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Zero-filled device memory on the current device.
class DeviceMemory {
 public:
  explicit DeviceMemory(size_t bytes) {
    DTRAIN_CUDA_CHECK(cudaMalloc(&data_, bytes));
    try {
      DTRAIN_CUDA_CHECK(cudaMemset(data_, 0, bytes));
    } catch (...) {
      cudaFree(data_);
      throw;
    }
  }
  ~DeviceMemory() { cudaFree(data_); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* get() const { return data_; }

 private:
  void* data_ = nullptr;
};

}  // namespace dtrain
