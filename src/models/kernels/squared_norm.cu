// The squared L2 norm of an fp32 slab into an fp64 device scalar
// (optimizer.h): fixed blocks, two passes, no atomics.
#include "models/kernels/device_utils.cuh"
#include "models/kernels/optimizer.h"

namespace dtrain::kernels {
namespace detail {
namespace {

constexpr int kNormThreads = 256;
constexpr int kNormWarps = kNormThreads / 32;
// At most this many partial sums; each block covers at least
// kNormElementsPerBlock elements, so small slabs use few blocks.
constexpr int kNormMaxBlocks = 1024;
constexpr int64_t kNormElementsPerBlock = 16384;

int norm_blocks(int64_t n) {
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(ceil_div(n, kNormElementsPerBlock), 1), kNormMaxBlocks));
}

__device__ __forceinline__ double warp_sum_double(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The block's sum, in thread 0, in a fixed order (warps, then warp 0).
__device__ __forceinline__ double block_sum_double(double v) {
  __shared__ double warp_sums[kNormWarps];
  v = warp_sum_double(v);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  double total = 0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < kNormWarps; ++w) total += warp_sums[w];
  }
  return total;
}

template <bool VEC>
__global__ void __launch_bounds__(kNormThreads) squared_norm_partials(const float* x, int64_t n, double* partials) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  double acc = 0;
  int64_t scalar_from = 0;
  if constexpr (VEC) {
    const int64_t vectors = n / 4;
    for (int64_t k = first; k < vectors; k += stride) {
      const float4 v = reinterpret_cast<const float4*>(x)[k];
      acc = fma(static_cast<double>(v.x), static_cast<double>(v.x), acc);
      acc = fma(static_cast<double>(v.y), static_cast<double>(v.y), acc);
      acc = fma(static_cast<double>(v.z), static_cast<double>(v.z), acc);
      acc = fma(static_cast<double>(v.w), static_cast<double>(v.w), acc);
    }
    scalar_from = vectors * 4;
  }
  for (int64_t i = scalar_from + first; i < n; i += stride) {
    const double v = x[i];
    acc = fma(v, v, acc);
  }
  const double total = block_sum_double(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void __launch_bounds__(kNormThreads)
    squared_norm_finish(const double* partials, int blocks, double* out, bool accumulate) {
  double acc = 0;
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) acc += partials[i];
  const double total = block_sum_double(acc);
  if (threadIdx.x == 0) *out = accumulate ? *out + total : total;
}

}  // namespace
}  // namespace detail

size_t squared_norm_workspace_size(int64_t n) {
  return n <= 0 ? 0 : static_cast<size_t>(detail::norm_blocks(n)) * sizeof(double);
}

cudaError_t squared_norm(double* out, bool accumulate, const float* x, int64_t n, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream) {
  using namespace detail;
  if (!out || n < 0 || (n > 0 && (!x || !workspace || !aligned16(workspace) ||
                                  workspace_bytes < squared_norm_workspace_size(n)))) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return accumulate ? cudaSuccess : cudaMemsetAsync(out, 0, sizeof(double), stream);
  const int blocks = norm_blocks(n);
  double* partials = static_cast<double*>(workspace);
  if (aligned16(x)) {
    squared_norm_partials<true><<<blocks, kNormThreads, 0, stream>>>(x, n, partials);
  } else {
    squared_norm_partials<false><<<blocks, kNormThreads, 0, stream>>>(x, n, partials);
  }
  const cudaError_t rc = launch_status();
  if (rc != cudaSuccess) return rc;
  squared_norm_finish<<<1, kNormThreads, 0, stream>>>(partials, blocks, out, accumulate);
  return launch_status();
}

}  // namespace dtrain::kernels
