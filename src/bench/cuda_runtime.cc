#include "bench/cuda_runtime.h"

#include <dlfcn.h>

#include <mutex>

#include "common/error.h"

// The exported name of a runtime function: the CUDA headers map some to
// versioned symbols (cudaGetDeviceProperties -> cudaGetDeviceProperties_v2).
#define DTRAIN_BENCH_STRINGIFY_(x) #x
#define DTRAIN_BENCH_SYMBOL(x) DTRAIN_BENCH_STRINGIFY_(x)

namespace dtrain::bench {
namespace {

struct Loaded {
  CudaRuntime runtime;
  bool ok = false;
  std::string why;
};

template <typename Fn>
bool resolve(void* handle, const char* name, Fn& fn, std::string& why) {
  fn = reinterpret_cast<Fn>(::dlsym(handle, name));
  if (fn == nullptr) why = std::string("the CUDA runtime has no ") + name;
  return fn != nullptr;
}

Loaded load() {
  Loaded loaded;
  const std::string library = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    loaded.why = ::dlerror();
    return loaded;
  }
  CudaRuntime& r = loaded.runtime;
  std::string& why = loaded.why;
  loaded.ok = resolve(handle, DTRAIN_BENCH_SYMBOL(cudaGetDeviceCount), r.getDeviceCount, why) &&
              resolve(handle, DTRAIN_BENCH_SYMBOL(cudaSetDevice), r.setDevice, why) &&
              resolve(handle, DTRAIN_BENCH_SYMBOL(cudaMalloc), r.malloc, why) &&
              resolve(handle, DTRAIN_BENCH_SYMBOL(cudaFree), r.free, why) &&
              resolve(handle, DTRAIN_BENCH_SYMBOL(cudaMemcpy), r.memcpy, why) &&
              resolve(handle, DTRAIN_BENCH_SYMBOL(cudaDeviceSynchronize), r.deviceSynchronize, why) &&
              resolve(handle, DTRAIN_BENCH_SYMBOL(cudaGetDeviceProperties), r.getDeviceProperties, why) &&
              resolve(handle, DTRAIN_BENCH_SYMBOL(cudaStreamCreateWithFlags), r.streamCreateWithFlags, why) &&
              resolve(handle, DTRAIN_BENCH_SYMBOL(cudaStreamDestroy), r.streamDestroy, why) &&
              resolve(handle, DTRAIN_BENCH_SYMBOL(cudaStreamSynchronize), r.streamSynchronize, why) &&
              resolve(handle, DTRAIN_BENCH_SYMBOL(cudaStreamBeginCapture), r.streamBeginCapture, why) &&
              resolve(handle, DTRAIN_BENCH_SYMBOL(cudaStreamEndCapture), r.streamEndCapture, why) &&
              resolve(handle, DTRAIN_BENCH_SYMBOL(cudaGraphInstantiateWithFlags), r.graphInstantiateWithFlags, why) &&
              resolve(handle, DTRAIN_BENCH_SYMBOL(cudaGraphLaunch), r.graphLaunch, why) &&
              resolve(handle, DTRAIN_BENCH_SYMBOL(cudaGraphExecDestroy), r.graphExecDestroy, why) &&
              resolve(handle, DTRAIN_BENCH_SYMBOL(cudaGraphDestroy), r.graphDestroy, why) &&
              resolve(handle, DTRAIN_BENCH_SYMBOL(cudaGetErrorName), r.getErrorName, why) &&
              resolve(handle, DTRAIN_BENCH_SYMBOL(cudaGetErrorString), r.getErrorString, why);
  return loaded;
}

}  // namespace

const CudaRuntime* cudaRuntime(std::string* why) {
  static const Loaded loaded = load();
  if (why != nullptr) *why = loaded.why;
  return loaded.ok ? &loaded.runtime : nullptr;
}

const CudaRuntime& requireCudaRuntime() {
  std::string why;
  if (const CudaRuntime* runtime = cudaRuntime(&why)) return *runtime;
  throw ConfigError("CUDA buffers need the CUDA runtime, which does not load (" + why +
                    "); install it, or benchmark the gloo backend (-b gloo)");
}

void checkCuda(cudaError_t rc, const char* call) {
  if (rc == cudaSuccess) return;
  const CudaRuntime& r = requireCudaRuntime();
  throw CommError(std::string(call) + " failed: " + r.getErrorName(rc) + " (" + r.getErrorString(rc) + ")");
}

}  // namespace dtrain::bench
