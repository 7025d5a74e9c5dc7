// Tensorwise float8 casts (fp8_cast.h): the absolute maximum in fixed
// blocks (partials, then one block finishes them into the scale), then one
// pass that scales, clamps and rounds.
#include <cuda_fp8.h>

#include "models/kernels/device_utils.cuh"
#include "models/kernels/fp8_cast.h"

namespace dtrain::kernels {
namespace detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxBlocks = 1024;
constexpr int64_t kElementsPerBlock = 16384;

int amax_blocks(int64_t n) {
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(ceil_div(n, kElementsPerBlock), 1), kMaxBlocks));
}

// max that keeps NaN, as torch's max reduction does (fmaxf would drop it).
__device__ __forceinline__ float nan_max(float a, float b) { return (a != a || b != b) ? __int_as_float(0x7fc00000) : fmaxf(a, b); }

__device__ __forceinline__ float block_max(float v) {
  __shared__ float warp_max[kWarps];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = v;
  __syncthreads();
  float m = 0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < kWarps; ++w) m = nan_max(m, warp_max[w]);
  }
  return m;
}

// 8 elements per 16-byte access for bf16, 4 for fp32, when aligned.
template <typename T>
constexpr int kVector = 16 / static_cast<int>(sizeof(T));

template <typename T>
__global__ void __launch_bounds__(kThreads) amax_partials(const T* x, int64_t n, bool vector, float* partials) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  float acc = 0;
  int64_t scalar_from = 0;
  if (vector) {
    constexpr int V = kVector<T>;
    const int64_t packs = n / V;
    for (int64_t k = first; k < packs; k += stride) {
      float v[V];
      load_floats<T, V>(x + k * V, v);
#pragma unroll
      for (int j = 0; j < V; ++j) acc = nan_max(acc, fabsf(v[j]));
    }
    scalar_from = packs * V;
  }
  for (int64_t i = scalar_from + first; i < n; i += stride) acc = nan_max(acc, fabsf(to_float(x[i])));
  const float m = block_max(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = m;
}

__device__ __forceinline__ float scale_of(float amax, float fmax) {
  const float clamped = amax != amax ? amax : fmaxf(amax, 1e-12f);  // clamp_min keeps NaN
  return fmax / clamped;  // torch's scalar / tensor divides (a reciprocal first is 1 ulp off)
}

// The amax a producer noted as bits (fp8_cast.h): a NaN as nan_max's.
__device__ __forceinline__ float amax_of_bits(uint32_t bits) {
  return bits > 0x7f800000u ? __int_as_float(0x7fc00000) : __uint_as_float(bits);
}

__global__ void __launch_bounds__(kThreads)
    amax_finish(const float* partials, int blocks, float fmax, float* scale, float* inverse) {
  float acc = 0;
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) acc = nan_max(acc, partials[i]);
  const float amax = block_max(acc);
  if (threadIdx.x == 0) {
    const float s = scale_of(amax, fmax);
    *scale = s;
    *inverse = 1.0f / s;
  }
}

template <__nv_fp8_interpretation_t F>
__device__ __forceinline__ __nv_fp8_storage_t to_fp8(float v, float s, float fmax) {
  v *= s;
  if (!(v != v)) v = fminf(fmaxf(v, -fmax), fmax);  // torch's clamp: NaN passes through
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, F);
}

template <typename T, __nv_fp8_interpretation_t F>
__global__ void __launch_bounds__(kThreads)
    scaled_cast(__nv_fp8_storage_t* y, const T* x, int64_t n, bool vector, const float* scale, float fmax) {
  const float s = *scale;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t scalar_from = 0;
  if (vector) {
    constexpr int V = kVector<T>;
    const int64_t packs = n / V;
    for (int64_t k = first; k < packs; k += stride) {
      float v[V];
      load_floats<T, V>(x + k * V, v);
      Pack<__nv_fp8_storage_t, V> out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = to_fp8<F>(v[j], s, fmax);
      store_pack<__nv_fp8_storage_t, V>(y + k * V, out);
    }
    scalar_from = packs * V;
  }
  for (int64_t i = scalar_from + first; i < n; i += stride) y[i] = to_fp8<F>(to_float(x[i]), s, fmax);
}

// The scaled cast of a row-major [rows, cols] x into y (the same layout)
// and yt = yᵀ ([cols, rows], row-major), a kTile x kTile tile per block:
// 16-byte loads along x's rows, the fp8 bytes kept in shared memory, then
// 16-byte stores along yt's rows (16 of x's rows each). rows and cols are
// multiples of 16, so no vector straddles an edge.
constexpr int kTile = 64;
constexpr int kTilePitch = kTile + 2;  // 16 rows apart land 8 banks apart: conflict-free column reads

// The tile's fp8 bytes (after the __syncthreads that follows their
// writes) into yt: thread t writes 16 bytes of yt's row col0 + t / 4, x's
// rows row0 + (t % 4) * 16 .. + 15 of that column.
__device__ __forceinline__ void store_tile_transposed(const __nv_fp8_storage_t (&tile)[kTile][kTilePitch],
                                                      __nv_fp8_storage_t* yt, int64_t rows, int64_t cols, int64_t row0,
                                                      int64_t col0) {
  const int c = threadIdx.x / 4, r = (threadIdx.x % 4) * 16;
  if (col0 + c >= cols || row0 + r >= rows) return;
  Pack<__nv_fp8_storage_t, 16> out;
#pragma unroll
  for (int j = 0; j < 16; ++j) out.v[j] = tile[r + j][c];
  store_pack<__nv_fp8_storage_t, 16>(yt + (col0 + c) * rows + row0 + r, out);
}

template <typename T, __nv_fp8_interpretation_t F>
__global__ void __launch_bounds__(kThreads)
    scaled_cast_transposed(__nv_fp8_storage_t* y, __nv_fp8_storage_t* yt, const T* x, int64_t rows, int64_t cols,
                           float* scale, float* inverse, const uint32_t* amax_bits, float fmax) {
  __shared__ __nv_fp8_storage_t tile[kTile][kTilePitch];
  constexpr int V = kVector<T>;
  constexpr int kVectorsPerRow = kTile / V;
  // A noted amax: every block derives the scale; the first writes it out.
  const float s = amax_bits ? scale_of(amax_of_bits(*amax_bits), fmax) : *scale;
  if (amax_bits && blockIdx.x == 0 && threadIdx.x == 0) {
    *scale = s;
    *inverse = 1.0f / s;
  }
  const int64_t tiles_per_row = (cols + kTile - 1) / kTile;
  const int64_t row0 = (blockIdx.x / tiles_per_row) * kTile;
  const int64_t col0 = (blockIdx.x % tiles_per_row) * kTile;
#pragma unroll
  for (int k = threadIdx.x; k < kTile * kVectorsPerRow; k += kThreads) {
    const int r = k / kVectorsPerRow, c = (k % kVectorsPerRow) * V;
    if (row0 + r >= rows || col0 + c >= cols) continue;
    const int64_t at = (row0 + r) * cols + col0 + c;
    float v[V];
    load_floats<T, V>(x + at, v);
    Pack<__nv_fp8_storage_t, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      out.v[j] = to_fp8<F>(v[j], s, fmax);
      tile[r][c + j] = out.v[j];
    }
    store_pack<__nv_fp8_storage_t, V>(y + at, out);
  }
  __syncthreads();
  store_tile_transposed(tile, yt, rows, cols, row0, col0);
}

// Axiswise casts (fp8_cast_axiswise): each row of y scaled by its row's
// maximum, each row of yt (a column of x) by its column's, scales rounded
// down to a power of two. Pass one: the maxima of a kTile x kTile tile per
// block, as bit patterns, into the rows' and columns' slots (atomic max);
// pass two: both casts from one read of x.

// fmax / max(amax, 1e-12) rounded down to a power of two (the exponent
// kept, the mantissa cleared); a NaN or infinite scale stays as it is.
__device__ __forceinline__ float pow2_scale_of_bits(uint32_t bits, float fmax) {
  const float s = scale_of(amax_of_bits(bits), fmax);
  return isfinite(s) ? __uint_as_float(__float_as_uint(s) & 0xff800000u) : s;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    axis_maxima(const T* x, int64_t rows, int64_t cols, uint32_t* row_bits, uint32_t* col_bits) {
  constexpr int V = kVector<T>;
  constexpr int kVectorsPerRow = kTile / V;  // threads sharing a row of the tile: adjacent lanes
  static_assert(kThreads % kVectorsPerRow == 0 && kVectorsPerRow <= 32);
  __shared__ uint32_t col_max[kTile];
  for (int c = threadIdx.x; c < kTile; c += kThreads) col_max[c] = 0;
  __syncthreads();
  const int64_t tiles_per_row = (cols + kTile - 1) / kTile;
  const int64_t row0 = (blockIdx.x / tiles_per_row) * kTile;
  const int64_t col0 = (blockIdx.x % tiles_per_row) * kTile;
  const int c = (threadIdx.x % kVectorsPerRow) * V;  // the same columns in every row this thread reads
  uint32_t mine[V] = {};
  for (int k = threadIdx.x; k < kTile * kVectorsPerRow; k += kThreads) {
    const int r = k / kVectorsPerRow;
    const bool inside = row0 + r < rows && col0 + c < cols;
    uint32_t row = 0;
    if (inside) {
      float v[V];
      load_floats<T, V>(x + (row0 + r) * cols + col0 + c, v);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const uint32_t b = abs_bits(v[j]);
        row = max(row, b);
        mine[j] = max(mine[j], b);
      }
    }
#pragma unroll
    for (int o = kVectorsPerRow / 2; o > 0; o >>= 1) row = max(row, __shfl_xor_sync(0xffffffffu, row, o));
    if (inside && threadIdx.x % kVectorsPerRow == 0) atomicMax(row_bits + row0 + r, row);
  }
  if (col0 + c < cols) {
#pragma unroll
    for (int j = 0; j < V; ++j) atomicMax(col_max + c + j, mine[j]);
  }
  __syncthreads();
  for (int j = threadIdx.x; j < kTile; j += kThreads) {
    if (col0 + j < cols) atomicMax(col_bits + col0 + j, col_max[j]);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    axis_cast(__nv_fp8_storage_t* y, __nv_fp8_storage_t* yt, const T* x, int64_t rows, int64_t cols,
              const uint32_t* row_bits, const uint32_t* col_bits, float* row_inverse, float* col_inverse,
              float fmax) {
  __shared__ __nv_fp8_storage_t tile[kTile][kTilePitch];
  __shared__ float col_scale[kTile];
  constexpr int V = kVector<T>;
  constexpr int kVectorsPerRow = kTile / V;
  const int64_t tiles_per_row = (cols + kTile - 1) / kTile;
  const int64_t row0 = (blockIdx.x / tiles_per_row) * kTile;
  const int64_t col0 = (blockIdx.x % tiles_per_row) * kTile;
  for (int j = threadIdx.x; j < kTile; j += kThreads) {
    if (col0 + j >= cols) continue;
    const float s = pow2_scale_of_bits(col_bits[col0 + j], fmax);
    col_scale[j] = s;
    if (row0 == 0) col_inverse[col0 + j] = 1.0f / s;  // the first row of tiles writes the columns' inverses
  }
  __syncthreads();
  for (int k = threadIdx.x; k < kTile * kVectorsPerRow; k += kThreads) {
    const int r = k / kVectorsPerRow, c = (k % kVectorsPerRow) * V;
    if (row0 + r >= rows || col0 + c >= cols) continue;
    const float s = pow2_scale_of_bits(row_bits[row0 + r], fmax);
    if (col0 == 0 && c == 0) row_inverse[row0 + r] = 1.0f / s;  // the first column of tiles writes the rows'
    const int64_t at = (row0 + r) * cols + col0 + c;
    float v[V];
    load_floats<T, V>(x + at, v);
    Pack<__nv_fp8_storage_t, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      out.v[j] = to_fp8<__NV_E4M3>(v[j], s, fmax);
      tile[r][c + j] = to_fp8<__NV_E4M3>(v[j], col_scale[c + j], fmax);
    }
    store_pack<__nv_fp8_storage_t, V>(y + at, out);
  }
  __syncthreads();
  store_tile_transposed(tile, yt, rows, cols, row0, col0);
}

template <typename T>
cudaError_t launch_axiswise(void* y, void* yt, float* row_inverse, float* col_inverse, const void* x_raw,
                            int64_t rows, int64_t cols, void* workspace, cudaStream_t stream) {
  const T* x = static_cast<const T*>(x_raw);
  auto* row_bits = static_cast<uint32_t*>(workspace);
  uint32_t* col_bits = row_bits + rows;
  const cudaError_t zeroed = cudaMemsetAsync(workspace, 0, sizeof(uint32_t) * (rows + cols), stream);
  if (zeroed != cudaSuccess) return zeroed;
  const int64_t tiles = ceil_div(rows, int64_t{kTile}) * ceil_div(cols, int64_t{kTile});
  if (tiles > 0x7fffffff) return cudaErrorInvalidValue;
  axis_maxima<T><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(x, rows, cols, row_bits, col_bits);
  axis_cast<T><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
      static_cast<__nv_fp8_storage_t*>(y), static_cast<__nv_fp8_storage_t*>(yt), x, rows, cols, row_bits, col_bits,
      row_inverse, col_inverse, 448.0f);
  return cudaGetLastError();
}

// The absolute maximum of x's n elements into scale and inverse (fp8_cast.h).
template <typename T>
void launch_amax(float* scale, float* inverse, const T* x, int64_t n, bool vector, float fmax, void* workspace,
                 cudaStream_t stream) {
  const int blocks = amax_blocks(n);
  auto* partials = static_cast<float*>(workspace);
  amax_partials<T><<<blocks, kThreads, 0, stream>>>(x, n, vector, partials);
  amax_finish<<<1, kThreads, 0, stream>>>(partials, blocks, fmax, scale, inverse);
}

float format_max(Fp8Format format) { return format == Fp8Format::kE4M3 ? 448.0f : 57344.0f; }

template <typename T>
cudaError_t launch_transposed(void* y, void* yt, float* scale, float* inverse, const void* x_raw, int64_t rows,
                              int64_t cols, Fp8Format format, void* workspace, cudaStream_t stream,
                              const uint32_t* amax_bits) {
  const T* x = static_cast<const T*>(x_raw);
  const float fmax = format_max(format);
  if (!amax_bits) launch_amax<T>(scale, inverse, x, rows * cols, true, fmax, workspace, stream);
  const int64_t tiles = ceil_div(rows, int64_t{kTile}) * ceil_div(cols, int64_t{kTile});
  if (tiles > 0x7fffffff) return cudaErrorInvalidValue;
  auto* out = static_cast<__nv_fp8_storage_t*>(y);
  auto* out_t = static_cast<__nv_fp8_storage_t*>(yt);
  if (format == Fp8Format::kE4M3) {
    scaled_cast_transposed<T, __NV_E4M3><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
        out, out_t, x, rows, cols, scale, inverse, amax_bits, fmax);
  } else {
    scaled_cast_transposed<T, __NV_E5M2><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(
        out, out_t, x, rows, cols, scale, inverse, amax_bits, fmax);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch(void* y, float* scale, float* inverse, const void* x_raw, int64_t n, Fp8Format format,
                   void* workspace, cudaStream_t stream) {
  const T* x = static_cast<const T*>(x_raw);
  auto* out = static_cast<__nv_fp8_storage_t*>(y);
  const bool vector = aligned16(x) && aligned16(y);
  const bool e4m3 = format == Fp8Format::kE4M3;
  const float fmax = format_max(format);
  launch_amax<T>(scale, inverse, x, n, vector, fmax, workspace, stream);
  const int cast_blocks = static_cast<int>(std::min<int64_t>(std::max<int64_t>(ceil_div(n, int64_t{kThreads} * 8), 1),
                                                             int64_t{65535}));
  if (e4m3) {
    scaled_cast<T, __NV_E4M3><<<cast_blocks, kThreads, 0, stream>>>(out, x, n, vector, scale, fmax);
  } else {
    scaled_cast<T, __NV_E5M2><<<cast_blocks, kThreads, 0, stream>>>(out, x, n, vector, scale, fmax);
  }
  return cudaGetLastError();
}

}  // namespace
}  // namespace detail

size_t fp8_cast_workspace_size(int64_t n) {
  return n <= 0 ? 0 : static_cast<size_t>(detail::amax_blocks(n)) * sizeof(float);
}

cudaError_t fp8_cast_transposed(void* y, void* yt, float* scale, float* inverse, const void* x, DType dtype,
                                int64_t rows, int64_t cols, Fp8Format format, void* workspace, cudaStream_t stream,
                                const uint32_t* amax_bits) {
  if (y == nullptr || yt == nullptr || scale == nullptr || inverse == nullptr || x == nullptr ||
      (workspace == nullptr && amax_bits == nullptr) ||
      rows <= 0 || cols <= 0 || rows % 16 != 0 || cols % 16 != 0 || !detail::aligned16(x) || !detail::aligned16(y) ||
      !detail::aligned16(yt)) {
    return cudaErrorInvalidValue;
  }
  return dtype == DType::kFloat32
             ? detail::launch_transposed<float>(y, yt, scale, inverse, x, rows, cols, format, workspace, stream,
                                                amax_bits)
             : detail::launch_transposed<detail::bf16>(y, yt, scale, inverse, x, rows, cols, format, workspace, stream,
                                                       amax_bits);
}

size_t fp8_cast_axiswise_workspace_size(int64_t rows, int64_t cols) {
  return rows <= 0 || cols <= 0 ? 0 : static_cast<size_t>(rows + cols) * sizeof(uint32_t);
}

cudaError_t fp8_cast_axiswise(void* y, void* yt, float* row_inverse, float* col_inverse, const void* x, DType dtype,
                              int64_t rows, int64_t cols, void* workspace, cudaStream_t stream) {
  if (y == nullptr || yt == nullptr || row_inverse == nullptr || col_inverse == nullptr || x == nullptr ||
      workspace == nullptr || rows <= 0 || cols <= 0 || rows % 16 != 0 || cols % 16 != 0 || !detail::aligned16(x) ||
      !detail::aligned16(y) || !detail::aligned16(yt)) {
    return cudaErrorInvalidValue;
  }
  return dtype == DType::kFloat32
             ? detail::launch_axiswise<float>(y, yt, row_inverse, col_inverse, x, rows, cols, workspace, stream)
             : detail::launch_axiswise<detail::bf16>(y, yt, row_inverse, col_inverse, x, rows, cols, workspace, stream);
}

cudaError_t fp8_cast(void* y, float* scale, float* inverse, const void* x, DType dtype, int64_t n, Fp8Format format,
                     void* workspace, cudaStream_t stream) {
  if (y == nullptr || scale == nullptr || inverse == nullptr || x == nullptr || workspace == nullptr || n <= 0) {
    return cudaErrorInvalidValue;
  }
  return dtype == DType::kFloat32
             ? detail::launch<float>(y, scale, inverse, x, n, format, workspace, stream)
             : detail::launch<detail::bf16>(y, scale, inverse, x, n, format, workspace, stream);
}

}  // namespace dtrain::kernels
