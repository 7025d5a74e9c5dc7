// SwiGLU, forward and backward (activation.h).
#include <initializer_list>
#include <type_traits>

#include "models/kernels/activation.h"
#include "models/kernels/tile_grid.cuh"

namespace dtrain::kernels {
namespace detail {
namespace {

__device__ __forceinline__ float sigmoid(float v) { return __frcp_rn(1.f + __expf(-v)); }

// AMAX: also max |y| as stored into *amax_bits (activation.h). Its lanes
// past the row stay until the warp's reduction instead of returning; the
// warp (32 column vectors of one row, kTileCols == 32) walks the same rows.
// Its grid is capped at one wave of blocks (the blocks that fit at once,
// each thread walking rows, as tile_grid's column-sum form), so that the
// warps' atomics are a few thousand per call, not one per 8 rows.
template <typename T, int VEC, bool AMAX>
__global__ void __launch_bounds__(kTileCols* kTileRows)
    swiglu_forward_kernel(T* y, const T* a, const T* b, int64_t rows, int ffn, int64_t in_stride,
                          uint32_t* amax_bits) {
  const int c = (blockIdx.x * kTileCols + threadIdx.x) * VEC;
  const bool in_row = c < ffn;
  if (!AMAX && !in_row) return;
  uint32_t amax = 0;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * kTileRows + threadIdx.y; in_row && r < rows;
       r += static_cast<int64_t>(gridDim.y) * kTileRows) {
    Pack<T, VEC> av = load_pack<T, VEC>(a + r * in_stride + c);
    const Pack<T, VEC> bv = load_pack<T, VEC>(b + r * in_stride + c);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float x = to_float(av.v[j]);
      av.v[j] = from_float<T>(x * sigmoid(x) * to_float(bv.v[j]));
      if constexpr (AMAX) amax = max(amax, abs_bits(to_float(av.v[j])));
    }
    store_pack<T, VEC>(y + r * ffn + c, av);
  }
  if constexpr (AMAX) note_warp_amax(amax, amax_bits);
}

// AMAX: also max |da| and max |db| as stored into *da_amax_bits and
// *db_amax_bits where those are not null (activation.h), as the forward.
template <typename T, int VEC, bool AMAX>
__global__ void __launch_bounds__(kTileCols* kTileRows)
    swiglu_backward_kernel(T* da, T* db, const T* dy, const T* a, const T* b, int64_t rows, int ffn, int64_t in_stride,
                           int64_t grad_stride, uint32_t* da_amax_bits, uint32_t* db_amax_bits) {
  const int c = (blockIdx.x * kTileCols + threadIdx.x) * VEC;
  const bool in_row = c < ffn;
  if (!AMAX && !in_row) return;
  uint32_t da_amax = 0, db_amax = 0;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * kTileRows + threadIdx.y; in_row && r < rows;
       r += static_cast<int64_t>(gridDim.y) * kTileRows) {
    const Pack<T, VEC> g = load_pack<T, VEC>(dy + r * ffn + c);
    const Pack<T, VEC> av = load_pack<T, VEC>(a + r * in_stride + c);
    const Pack<T, VEC> bv = load_pack<T, VEC>(b + r * in_stride + c);
    Pack<T, VEC> ga, gb;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float x = to_float(av.v[j]), y = to_float(bv.v[j]), d = to_float(g.v[j]);
      const float s = sigmoid(x);
      ga.v[j] = from_float<T>(d * y * s * (1.f + x * (1.f - s)));
      gb.v[j] = from_float<T>(d * x * s);
      if constexpr (AMAX) {
        da_amax = max(da_amax, abs_bits(to_float(ga.v[j])));
        db_amax = max(db_amax, abs_bits(to_float(gb.v[j])));
      }
    }
    store_pack<T, VEC>(da + r * grad_stride + c, ga);
    store_pack<T, VEC>(db + r * grad_stride + c, gb);
  }
  if constexpr (AMAX) {
    // Uniform across the warp: every lane sees the same pointers.
    if (da_amax_bits) note_warp_amax(da_amax, da_amax_bits);
    if (db_amax_bits) note_warp_amax(db_amax, db_amax_bits);
  }
}

template <typename T>
bool swiglu_vectorised(int ffn, std::initializer_list<int64_t> strides, std::initializer_list<const void*> ptrs) {
  if (ffn % kVec16<T> != 0) return false;
  for (int64_t s : strides) {
    if (s % kVec16<T> != 0) return false;
  }
  for (const void* p : ptrs) {
    if (!aligned16(p)) return false;
  }
  return true;
}

}  // namespace
}  // namespace detail

cudaError_t swiglu_forward(void* y, const void* a, const void* b, int64_t rows, int ffn, int64_t in_row_stride,
                           DType dtype, cudaStream_t stream, uint32_t* amax_bits) {
  using namespace detail;
  if (!y || !a || !b || rows < 0 || ffn <= 0 || in_row_stride < ffn) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  return dispatch_act(dtype, [&](auto act) -> cudaError_t {
    using T = typename decltype(act)::type;
    auto launch = [&](auto vec_tag) {
      constexpr int kV = decltype(vec_tag)::value;
      if (amax_bits) {
        static const int resident = resident_blocks(swiglu_forward_kernel<T, kV, true>, kTileCols * kTileRows);
        swiglu_forward_kernel<T, kV, true><<<tile_grid(rows, ffn / kV, resident), tile_block(), 0, stream>>>(
            static_cast<T*>(y), static_cast<const T*>(a), static_cast<const T*>(b), rows, ffn, in_row_stride,
            amax_bits);
      } else {
        swiglu_forward_kernel<T, kV, false><<<tile_grid(rows, ffn / kV), tile_block(), 0, stream>>>(
            static_cast<T*>(y), static_cast<const T*>(a), static_cast<const T*>(b), rows, ffn, in_row_stride,
            nullptr);
      }
      return launch_status();
    };
    if (swiglu_vectorised<T>(ffn, {in_row_stride}, {y, a, b})) {
      return launch(std::integral_constant<int, kVec16<T>>{});
    }
    return launch(std::integral_constant<int, 1>{});
  });
}

cudaError_t swiglu_backward(void* da, void* db, const void* dy, const void* a, const void* b, int64_t rows, int ffn,
                            int64_t in_row_stride, int64_t grad_row_stride, DType dtype, cudaStream_t stream,
                            uint32_t* da_amax_bits, uint32_t* db_amax_bits) {
  using namespace detail;
  if (!da || !db || !dy || !a || !b || rows < 0 || ffn <= 0 || in_row_stride < ffn || grad_row_stride < ffn) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  return dispatch_act(dtype, [&](auto act) -> cudaError_t {
    using T = typename decltype(act)::type;
    auto launch = [&](auto vec_tag) {
      constexpr int kV = decltype(vec_tag)::value;
      if (da_amax_bits || db_amax_bits) {
        static const int resident = resident_blocks(swiglu_backward_kernel<T, kV, true>, kTileCols * kTileRows);
        swiglu_backward_kernel<T, kV, true><<<tile_grid(rows, ffn / kV, resident), tile_block(), 0, stream>>>(
            static_cast<T*>(da), static_cast<T*>(db), static_cast<const T*>(dy), static_cast<const T*>(a),
            static_cast<const T*>(b), rows, ffn, in_row_stride, grad_row_stride, da_amax_bits, db_amax_bits);
      } else {
        swiglu_backward_kernel<T, kV, false><<<tile_grid(rows, ffn / kV), tile_block(), 0, stream>>>(
            static_cast<T*>(da), static_cast<T*>(db), static_cast<const T*>(dy), static_cast<const T*>(a),
            static_cast<const T*>(b), rows, ffn, in_row_stride, grad_row_stride, nullptr, nullptr);
      }
      return launch_status();
    };
    if (swiglu_vectorised<T>(ffn, {in_row_stride, grad_row_stride}, {da, db, dy, a, b})) {
      return launch(std::integral_constant<int, kVec16<T>>{});
    }
    return launch(std::integral_constant<int, 1>{});
  });
}

}  // namespace dtrain::kernels
