// The CUDA runtime functions the collective benchmarks call on CUDA
// buffers, resolved from libcudart at first use (dlopen), so that
// libdtrain_bench, and the dtrain binary that links it, load on a machine
// without CUDA (a CPU-only Debian package). Built only with the NCCL
// backend (DTRAIN_HAVE_NCCL); private to bench/.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace dtrain::bench {

struct CudaRuntime {
  decltype(&cudaGetDeviceCount) getDeviceCount = nullptr;
  decltype(&cudaSetDevice) setDevice = nullptr;
  decltype(&cudaMalloc) malloc = nullptr;
  decltype(&cudaFree) free = nullptr;
  decltype(&cudaMemcpy) memcpy = nullptr;
  decltype(&cudaDeviceSynchronize) deviceSynchronize = nullptr;
  decltype(&cudaGetDeviceProperties) getDeviceProperties = nullptr;
  decltype(&cudaStreamCreateWithFlags) streamCreateWithFlags = nullptr;
  decltype(&cudaStreamDestroy) streamDestroy = nullptr;
  decltype(&cudaStreamSynchronize) streamSynchronize = nullptr;
  decltype(&cudaStreamBeginCapture) streamBeginCapture = nullptr;
  decltype(&cudaStreamEndCapture) streamEndCapture = nullptr;
  decltype(&cudaGraphInstantiateWithFlags) graphInstantiateWithFlags = nullptr;
  decltype(&cudaGraphLaunch) graphLaunch = nullptr;
  decltype(&cudaGraphExecDestroy) graphExecDestroy = nullptr;
  decltype(&cudaGraphDestroy) graphDestroy = nullptr;
  decltype(&cudaGetErrorName) getErrorName = nullptr;
  decltype(&cudaGetErrorString) getErrorString = nullptr;
};

// The runtime, loaded once (libcudart.so.<the major version built
// against>); nullptr when it does not load, with the reason in `why`.
const CudaRuntime* cudaRuntime(std::string* why = nullptr);
// The runtime or a ConfigError saying it does not load and what to do.
const CudaRuntime& requireCudaRuntime();

// Throws CommError naming the call, the CUDA error name and string.
void checkCuda(cudaError_t rc, const char* call);

}  // namespace dtrain::bench

#define DTRAIN_BENCH_CUDA(call) ::dtrain::bench::checkCuda((call), #call)
