// Bias + GELU (tanh approximation), forward and backward (activation.h).
#include <algorithm>
#include <initializer_list>
#include <type_traits>

#include "models/kernels/activation.h"
#include "models/kernels/column_partials.cuh"
#include "models/kernels/tile_grid.cuh"

namespace dtrain::kernels {
namespace detail {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

// 0.5 (1 + tanh(u)) written as sigmoid(2u): the same function, without the
// cancellation of 1 + tanh(u) for very negative h (where torch's form
// returns exactly 0 and this one the tiny true value).
__device__ __forceinline__ float sigmoid_2u(float h) {
  const float u = kSqrt2OverPi * (h + kGeluCoeff * h * h * h);
  return __frcp_rn(1.f + __expf(-2.f * u));
}

// The hardware tanh (one MUFU.TANH, relative error about 2^-11): below what
// a bf16 result keeps (2^-9), and the bf16 kernels are issue-bound enough
// for it to matter (measured 7% on an H100).
__device__ __forceinline__ float tanh_approx(float v) {
  float r;
  asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}

// GELU and its derivative; FAST (bf16 outputs) uses the hardware tanh.
template <bool FAST>
__device__ __forceinline__ float gelu(float h) {
  if (FAST) return 0.5f * h * (1.f + tanh_approx(kSqrt2OverPi * (h + kGeluCoeff * h * h * h)));
  return h * sigmoid_2u(h);
}

// d/dh [h s] with s = 0.5 (1 + tanh(u)) = sigmoid(2u): s + h s (1 - s) 2 u'(h),
// u' = sqrt(2/pi) (1 + 3 c h^2).
template <bool FAST>
__device__ __forceinline__ float gelu_grad(float h) {
  const float s = FAST ? 0.5f * (1.f + tanh_approx(kSqrt2OverPi * (h + kGeluCoeff * h * h * h))) : sigmoid_2u(h);
  return s + h * s * (1.f - s) * 2.f * kSqrt2OverPi * (1.f + 3.f * kGeluCoeff * h * h);
}

template <typename T>
inline constexpr bool kFastGelu = std::is_same_v<T, bf16>;

template <typename W, int VEC>
__device__ __forceinline__ void load_bias(const W* bias, int c, bool in, float (&b)[VEC]) {
  if (bias && in) {
    load_floats<W, VEC>(bias + c, b);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) b[j] = 0.f;
  }
}

template <typename T, typename W, int VEC>
__global__ void __launch_bounds__(kTileCols* kTileRows)
    gelu_forward_kernel(T* y, const T* x, const W* bias, int64_t rows, int cols) {
  const int c = (blockIdx.x * kTileCols + threadIdx.x) * VEC;
  if (c >= cols) return;
  float b[VEC];
  load_bias<W, VEC>(bias, c, true, b);
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * kTileRows + threadIdx.y; r < rows;
       r += static_cast<int64_t>(gridDim.y) * kTileRows) {
    Pack<T, VEC> v = load_pack<T, VEC>(x + r * cols + c);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      v.v[j] = from_float<T>(gelu<kFastGelu<T>>(to_float(v.v[j]) + b[j]));
    }
    store_pack<T, VEC>(y + r * cols + c, v);
  }
}

// With partials, each block also leaves the sum of its dx values per column
// (its rows, in a fixed order) in partials[blockIdx.y][cols]. With y, it
// also writes the forward's output again (the same values gelu_forward
// wrote), for a caller that did not keep it.
template <typename T, typename W, int VEC>
__global__ void __launch_bounds__(kTileCols* kTileRows)
    gelu_backward_kernel(T* dx, const T* dy, const T* x, const W* bias, int64_t rows, int cols, float* partials,
                         T* y) {
  const int c = (blockIdx.x * kTileCols + threadIdx.x) * VEC;
  const bool in = c < cols;
  float b[VEC], acc[VEC];
  load_bias<W, VEC>(bias, c, in, b);
#pragma unroll
  for (int j = 0; j < VEC; ++j) acc[j] = 0.f;
  if (in) {
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * kTileRows + threadIdx.y; r < rows;
         r += static_cast<int64_t>(gridDim.y) * kTileRows) {
      Pack<T, VEC> g = load_pack<T, VEC>(dy + r * cols + c);
      const Pack<T, VEC> h = load_pack<T, VEC>(x + r * cols + c);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float d = to_float(g.v[j]) * gelu_grad<kFastGelu<T>>(to_float(h.v[j]) + b[j]);
        acc[j] += d;
        g.v[j] = from_float<T>(d);
      }
      store_pack<T, VEC>(dx + r * cols + c, g);
      if (y) {
        Pack<T, VEC> out;
#pragma unroll
        for (int j = 0; j < VEC; ++j) out.v[j] = from_float<T>(gelu<kFastGelu<T>>(to_float(h.v[j]) + b[j]));
        store_pack<T, VEC>(y + r * cols + c, out);
      }
    }
  }
  if (!partials) return;
  __shared__ float row_sums[kTileRows][kTileCols * VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) row_sums[threadIdx.y][threadIdx.x * VEC + j] = acc[j];
  __syncthreads();
  if (threadIdx.y != 0 || !in) return;
  float* out = partials + static_cast<int64_t>(blockIdx.y) * cols + c;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kTileRows; ++i) s += row_sums[i][threadIdx.x * VEC + j];
    out[j] = s;
  }
}

template <typename T>
int gelu_vec(int cols, std::initializer_list<const void*> ptrs) {
  if (cols % kVec16<T> != 0) return 1;
  for (const void* p : ptrs) {
    if (!aligned16(p)) return 1;
  }
  return kVec16<T>;
}

}  // namespace
}  // namespace detail

size_t gelu_backward_workspace_size(int64_t rows, int cols) {
  if (rows <= 0 || cols <= 0) return 0;
  const int64_t row_groups = std::min<int64_t>(detail::ceil_div(rows, detail::kTileRows), detail::kTileReduceBlocks);
  return static_cast<size_t>(row_groups) * cols * sizeof(float);
}

cudaError_t gelu_forward(void* y, const void* x, const void* bias, int64_t rows, int cols, DType act_dtype,
                         DType param_dtype, cudaStream_t stream) {
  using namespace detail;
  if (!y || !x || rows < 0 || cols <= 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  return dispatch_act_param(act_dtype, param_dtype, [&](auto act, auto param) -> cudaError_t {
    using T = typename decltype(act)::type;
    using W = typename decltype(param)::type;
    auto launch = [&](auto vec_tag) {
      constexpr int kV = decltype(vec_tag)::value;
      gelu_forward_kernel<T, W, kV><<<tile_grid(rows, cols / kV), tile_block(), 0, stream>>>(
          static_cast<T*>(y), static_cast<const T*>(x), static_cast<const W*>(bias), rows, cols);
      return launch_status();
    };
    if (gelu_vec<T>(cols, {y, x, bias}) > 1) return launch(std::integral_constant<int, kVec16<T>>{});
    return launch(std::integral_constant<int, 1>{});
  });
}

cudaError_t gelu_backward(void* dx, void* dbias, bool accumulate, void* workspace, size_t workspace_bytes,
                          const void* dy, const void* x, const void* bias, int64_t rows, int cols, DType act_dtype,
                          DType param_dtype, cudaStream_t stream, void* y) {
  using namespace detail;
  if (!dx || !dy || !x || rows < 0 || cols <= 0 || (dbias && !bias)) return cudaErrorInvalidValue;
  if (dbias && (!workspace || !aligned16(workspace) || workspace_bytes < gelu_backward_workspace_size(rows, cols))) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  return dispatch_act_param(act_dtype, param_dtype, [&](auto act, auto param) -> cudaError_t {
    using T = typename decltype(act)::type;
    using W = typename decltype(param)::type;
    float* partials = dbias ? static_cast<float*>(workspace) : nullptr;
    auto launch = [&](auto vec_tag) {
      constexpr int kV = decltype(vec_tag)::value;
      // With dbias, a bounded number of row groups (the partial sums).
      const dim3 grid = partials ? tile_grid(rows, cols / kV, kTileReduceBlocks) : tile_grid(rows, cols / kV);
      gelu_backward_kernel<T, W, kV>
          <<<grid, tile_block(), 0, stream>>>(static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(x),
                                              static_cast<const W*>(bias), rows, cols, partials, static_cast<T*>(y));
      cudaError_t rc = launch_status();
      if (rc != cudaSuccess || !partials) return rc;
      return launch_reduce_column_partials<W>(partials, static_cast<int>(grid.y), cols, cols, static_cast<W*>(dbias),
                                              nullptr, accumulate, stream);
    };
    if (gelu_vec<T>(cols, {dx, dy, x, bias, y}) > 1) return launch(std::integral_constant<int, kVec16<T>>{});
    return launch(std::integral_constant<int, 1>{});
  });
}

}  // namespace dtrain::kernels
