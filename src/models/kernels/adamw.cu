// The fused AdamW update of one fp32 slab (optimizer.h).
#include "models/kernels/device_utils.cuh"
#include "models/kernels/optimizer.h"

namespace dtrain::kernels {
namespace detail {
namespace {

constexpr int kAdamThreads = 256;
// Blocks per multiprocessor of the grid-stride loop: enough loads in flight
// to saturate HBM, few enough that each thread amortises the coefficients.
constexpr int kAdamBlocksPerSm = 8;

struct AdamWKernelArgs {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  int64_t n;
  const float* lr;
  const float* step;
  const float* grad_scale;
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay;
};

// The per-step scalars, from the device-side lr and step count.
struct AdamWCoefficients {
  float decay;      // 1 - lr * weight_decay
  float step_size;  // lr / bias_correction1
  float bias_correction2_sqrt;
  float grad_scale;
};

__device__ __forceinline__ AdamWCoefficients coefficients(const AdamWKernelArgs& a) {
  const float lr = *a.lr;
  const float step = *a.step;
  AdamWCoefficients c;
  c.decay = 1.f - lr * a.weight_decay;
  c.step_size = lr / (1.f - powf(a.beta1, step));
  c.bias_correction2_sqrt = sqrtf(1.f - powf(a.beta2, step));
  c.grad_scale = a.grad_scale ? *a.grad_scale : 1.f;
  return c;
}

// torch's lerp, whose two branches keep the result exact at either end.
__device__ __forceinline__ float torch_lerp(float self, float end, float weight) {
  return weight < 0.5f ? self + weight * (end - self) : end - (end - self) * (1.f - weight);
}

__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v, const AdamWKernelArgs& a,
                                              const AdamWCoefficients& c) {
  if (a.grad_scale) g *= c.grad_scale;
  // __fmul_rn where torch rounds a product in a kernel of its own (no fused
  // multiply-add across what are separate torch ops).
  if (a.weight_decay != 0.f) p = __fmul_rn(p, c.decay);
  m = torch_lerp(m, g, a.one_minus_beta1);
  v = __fmul_rn(v, a.beta2) + a.one_minus_beta2 * g * g;
  const float denom = sqrtf(v) / c.bias_correction2_sqrt + a.eps;
  p = p - __fmul_rn(c.step_size, m / denom);
}

// Vector k (elements 4k .. 4k + 3) updated in place; its new parameters.
__device__ __forceinline__ float4 adamw_vector(int64_t k, const AdamWKernelArgs& a, const AdamWCoefficients& c) {
  float4 p = reinterpret_cast<const float4*>(a.param)[k];
  const float4 g = reinterpret_cast<const float4*>(a.grad)[k];
  float4 m = reinterpret_cast<const float4*>(a.exp_avg)[k];
  float4 v = reinterpret_cast<const float4*>(a.exp_avg_sq)[k];
  adamw_element(p.x, g.x, m.x, v.x, a, c);
  adamw_element(p.y, g.y, m.y, v.y, a, c);
  adamw_element(p.z, g.z, m.z, v.z, a, c);
  adamw_element(p.w, g.w, m.w, v.w, a, c);
  reinterpret_cast<float4*>(a.param)[k] = p;
  reinterpret_cast<float4*>(a.exp_avg)[k] = m;
  reinterpret_cast<float4*>(a.exp_avg_sq)[k] = v;
  return p;
}

// Element i updated in place; its new parameter.
__device__ __forceinline__ float adamw_scalar(int64_t i, const AdamWKernelArgs& a, const AdamWCoefficients& c) {
  float p = a.param[i], m = a.exp_avg[i], v = a.exp_avg_sq[i];
  adamw_element(p, a.grad[i], m, v, a, c);
  a.param[i] = p;
  a.exp_avg[i] = m;
  a.exp_avg_sq[i] = v;
  return p;
}

template <bool VEC>
__global__ void __launch_bounds__(kAdamThreads) adamw_kernel(const AdamWKernelArgs a) {
  const AdamWCoefficients c = coefficients(a);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t scalar_from = 0;
  if constexpr (VEC) {
    const int64_t vectors = a.n / 4;
    for (int64_t k = first; k < vectors; k += stride) adamw_vector(k, a, c);
    scalar_from = vectors * 4;
  }
  for (int64_t i = scalar_from + first; i < a.n; i += stride) adamw_scalar(i, a, c);
}

// The update by tiles (AdamWArgs::tiles), each block a tile at a time,
// keeping the maximum of |param| of each tile that lies in a range: a
// block reduction, then one atomic max per tile. The same arithmetic per
// element as adamw_kernel.

template <bool VEC>
__global__ void __launch_bounds__(kAdamThreads)
    adamw_tiles_kernel(const AdamWKernelArgs a, const AdamWTile* tiles, int64_t tile_count, uint32_t* amax_bits) {
  __shared__ uint32_t warp_max[kAdamThreads / 32];
  const AdamWCoefficients c = coefficients(a);
  for (int64_t t = blockIdx.x; t < tile_count; t += gridDim.x) {
    const AdamWTile tile = tiles[t];
    uint32_t acc = 0;
    int64_t scalar_from = tile.begin;
    if constexpr (VEC) {
      if (tile.begin % 4 == 0) {
        const int64_t last = tile.end / 4;
        for (int64_t k = tile.begin / 4 + threadIdx.x; k < last; k += blockDim.x) {
          const float4 p = adamw_vector(k, a, c);
          acc = max(max(acc, max(abs_bits(p.x), abs_bits(p.y))), max(abs_bits(p.z), abs_bits(p.w)));
        }
        scalar_from = max(tile.begin, last * 4);
      }
    }
    for (int64_t i = scalar_from + threadIdx.x; i < tile.end; i += blockDim.x) {
      acc = max(acc, abs_bits(adamw_scalar(i, a, c)));
    }
    if (tile.range < 0) continue;  // the same tile, so the same branch, for the whole block
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc = max(acc, __shfl_xor_sync(0xffffffffu, acc, o));
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t m = 0;
      for (int w = 0; w < kAdamThreads / 32; ++w) m = max(m, warp_max[w]);
      atomicMax(amax_bits + tile.range, m);
    }
    __syncthreads();  // warp_max is reused by the next tile
  }
}

}  // namespace
}  // namespace detail

std::vector<AdamWTile> adamw_tiles(int64_t n, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  std::vector<AdamWTile> tiles;
  const auto cover = [&](int64_t begin, int64_t end, int64_t range) {
    for (int64_t at = begin; at < end; at += kAdamWTileElements) {
      tiles.push_back({at, std::min(end, at + kAdamWTileElements), range});
    }
  };
  int64_t at = 0;
  for (size_t r = 0; r < ranges.size(); ++r) {
    const auto [begin, end] = ranges[r];
    if (begin < at || end < begin || end > n) return {};  // not sorted, overlapping or outside: no tiles
    cover(at, begin, -1);
    cover(begin, end, static_cast<int64_t>(r));
    at = end;
  }
  cover(at, n, -1);
  return tiles;
}

cudaError_t adamw_step(const AdamWArgs& args, cudaStream_t stream) {
  using namespace detail;
  if (!args.param || !args.grad || !args.exp_avg || !args.exp_avg_sq || !args.lr || !args.step || args.n < 0) {
    return cudaErrorInvalidValue;
  }
  if (args.n == 0) return cudaSuccess;
  const AdamWKernelArgs a{args.param,
                          args.grad,
                          args.exp_avg,
                          args.exp_avg_sq,
                          args.n,
                          args.lr,
                          args.step,
                          args.grad_scale,
                          static_cast<float>(args.beta1),
                          static_cast<float>(args.beta2),
                          static_cast<float>(1.0 - args.beta1),
                          static_cast<float>(1.0 - args.beta2),
                          static_cast<float>(args.eps),
                          static_cast<float>(args.weight_decay)};
  const bool vec = aligned16(args.param) && aligned16(args.grad) && aligned16(args.exp_avg) &&
                   aligned16(args.exp_avg_sq);
  if (args.amax_bits != nullptr) {
    if (args.tiles == nullptr || args.tile_count <= 0 || args.ranges <= 0) return cudaErrorInvalidValue;
    const cudaError_t zeroed = cudaMemsetAsync(args.amax_bits, 0, sizeof(uint32_t) * args.ranges, stream);
    if (zeroed != cudaSuccess) return zeroed;
    const int blocks = static_cast<int>(
        std::min<int64_t>(args.tile_count, int64_t{multiprocessor_count()} * kAdamBlocksPerSm));
    if (vec) {
      adamw_tiles_kernel<true><<<blocks, kAdamThreads, 0, stream>>>(a, args.tiles, args.tile_count, args.amax_bits);
    } else {
      adamw_tiles_kernel<false><<<blocks, kAdamThreads, 0, stream>>>(a, args.tiles, args.tile_count, args.amax_bits);
    }
    return launch_status();
  }
  const int64_t work = vec ? (args.n + 3) / 4 : args.n;
  const int blocks = static_cast<int>(
      std::min<int64_t>(ceil_div(work, kAdamThreads), int64_t{multiprocessor_count()} * kAdamBlocksPerSm));
  if (vec) {
    adamw_kernel<true><<<blocks, kAdamThreads, 0, stream>>>(a);
  } else {
    adamw_kernel<false><<<blocks, kAdamThreads, 0, stream>>>(a);
  }
  return launch_status();
}

}  // namespace dtrain::kernels
