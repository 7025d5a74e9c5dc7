// Fused softmax cross-entropy with dlogits in place (cross_entropy.h).
#include <cmath>
#include <type_traits>

#include "models/kernels/cross_entropy.h"
#include "models/kernels/device_utils.cuh"

namespace dtrain::kernels {
namespace detail {
namespace {

constexpr int kCeThreads = 1024;
constexpr int kCeUnroll = 4;       // loads in flight per thread, pass 1
constexpr int kCeWriteUnroll = 2;  // pass 2 (mostly L2 hits)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Every thread gets the block's sum (or max), combined in a fixed order.
template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* scratch /* [32] */) {
  v = MAX ? warp_max(v) : warp_sum(v);
  const int lane = threadIdx.x & 31;
  if (lane == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  float r = lane < warps ? scratch[lane] : (MAX ? -INFINITY : 0.f);
  r = MAX ? warp_max(r) : warp_sum(r);
  __syncthreads();
  return r;
}

// Online max/sum in base-2 units (u = x * log2 e): m is the running max of
// u, s the sum of 2^(u - m).
__device__ __forceinline__ void online_add(float& m, float& s, float group_max_u) {
  if (group_max_u > m) {
    s *= exp2f(m - group_max_u);
    m = group_max_u;
  }
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kCeThreads, 1) cross_entropy_kernel(CrossEntropyArgs a, int64_t stride) {
  __shared__ float scratch[32];
  const int64_t row = gridDim.x - 1 - static_cast<int64_t>(blockIdx.x);  // last rows first: the matmul just wrote them
  T* x = static_cast<T*>(a.logits) + row * stride;
  const int64_t target = a.target_type == IndexType::kInt64 ? static_cast<const int64_t*>(a.targets)[row]
                                                            : static_cast<const int32_t*>(a.targets)[row];
  const bool ignored = target == a.ignore_index;
  const bool in_range = target >= 0 && target < a.vocab;
  // Read before the reductions' barriers; pass 2 overwrites it.
  const float target_logit = (threadIdx.x == 0 && in_range) ? to_float(x[target]) : 0.f;

  const int vocab = a.vocab;
  const int full = vocab / VEC;
  float m = -INFINITY, s = 0.f;
  // kCeUnroll loads in flight per thread before the first use: one block
  // per multiprocessor needs them to cover the memory latency.
  for (int i0 = threadIdx.x; i0 < full; i0 += kCeUnroll * blockDim.x) {
    Pack<T, VEC> p[kCeUnroll];
#pragma unroll
    for (int u = 0; u < kCeUnroll; ++u) {
      const int i = i0 + u * blockDim.x;
      if (i < full) p[u] = load_pack<T, VEC>(x + static_cast<int64_t>(i) * VEC);
    }
#pragma unroll
    for (int u = 0; u < kCeUnroll; ++u) {
      if (i0 + u * static_cast<int>(blockDim.x) >= full) continue;
      float gmax = to_float(p[u].v[0]);
#pragma unroll
      for (int j = 1; j < VEC; ++j) gmax = fmaxf(gmax, to_float(p[u].v[j]));
      online_add(m, s, gmax * kLog2e);
      if (m == -INFINITY) continue;
#pragma unroll
      for (int j = 0; j < VEC; ++j) s += exp2f(fmaf(to_float(p[u].v[j]), kLog2e, -m));
    }
  }
  for (int i = full * VEC + threadIdx.x; i < vocab; i += blockDim.x) {
    const float u = to_float(x[i]) * kLog2e;
    online_add(m, s, u);
    if (m != -INFINITY) s += exp2f(u - m);
  }
  const float block_max = block_reduce<true>(m, scratch);
  if (m != -INFINITY) s *= exp2f(m - block_max);
  const float lse2 = block_max + log2f(block_reduce<false>(s, scratch));  // log2-sum-exp2 of u

  if (threadIdx.x == 0) {
    const float lse = lse2 * kLn2;
    a.losses[row] = ignored ? 0.f : (in_range ? lse - target_logit : NAN);
    if (a.lse) a.lse[row] = lse;
  }
  if (!a.write_dlogits) return;
  const float scale = ignored ? 0.f : a.grad_scale * (a.grad_scale_device ? *a.grad_scale_device : 1.f);
  const int64_t padded_full = stride / VEC;
  for (int64_t i0 = threadIdx.x; i0 < padded_full; i0 += kCeWriteUnroll * blockDim.x) {
    Pack<T, VEC> p[kCeWriteUnroll];
#pragma unroll
    for (int u = 0; u < kCeWriteUnroll; ++u) {
      const int64_t c0 = (i0 + u * blockDim.x) * VEC;
      if (!ignored && c0 < vocab) p[u] = load_pack<T, VEC>(x + c0);
    }
#pragma unroll
    for (int u = 0; u < kCeWriteUnroll; ++u) {
      const int64_t i = i0 + u * blockDim.x;
      if (i >= padded_full) continue;
      const int64_t c0 = i * VEC;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int64_t c = c0 + j;
        float g = 0.f;
        if (!ignored && c < vocab) {
          g = (exp2f(fmaf(to_float(p[u].v[j]), kLog2e, -lse2)) - (c == target ? 1.f : 0.f)) * scale;
        }
        p[u].v[j] = from_float<T>(g);
      }
      store_pack<T, VEC>(x + c0, p[u]);
    }
  }
  for (int64_t c = padded_full * VEC + threadIdx.x; c < stride; c += blockDim.x) {  // scalar path only
    float g = 0.f;
    if (!ignored && c < vocab) g = (exp2f(fmaf(to_float(x[c]), kLog2e, -lse2)) - (c == target ? 1.f : 0.f)) * scale;
    x[c] = from_float<T>(g);
  }
}

}  // namespace
}  // namespace detail

cudaError_t cross_entropy_forward_backward(const CrossEntropyArgs& a, cudaStream_t stream) {
  using namespace detail;
  const int64_t stride = a.row_stride ? a.row_stride : a.vocab;
  if (!a.logits || !a.targets || !a.losses || a.rows < 0 || a.vocab <= 0 || stride < a.vocab || a.rows > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  if (a.rows == 0) return cudaSuccess;
  return dispatch_act(a.dtype, [&](auto act) -> cudaError_t {
    using T = typename decltype(act)::type;
    constexpr int kV = kVec16<T>;
    if (stride % kV == 0 && aligned16(a.logits)) {
      cross_entropy_kernel<T, kV><<<static_cast<unsigned>(a.rows), kCeThreads, 0, stream>>>(a, stride);
    } else {
      cross_entropy_kernel<T, 1><<<static_cast<unsigned>(a.rows), kCeThreads, 0, stream>>>(a, stride);
    }
    return launch_status();
  });
}

}  // namespace dtrain::kernels
