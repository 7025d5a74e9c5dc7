// The bias gradient of a product: the column sums of its output gradient,
// at memory bandwidth and deterministic (activation.h).
#include "models/kernels/activation.h"
#include "models/kernels/column_partials.cuh"
#include "models/kernels/tile_grid.cuh"

namespace dtrain::kernels {
namespace detail {
namespace {

// Each block sums its rows (a fixed stride of row groups) of VEC columns
// per thread, then leaves the block's sums in partials[blockIdx.y][cols].
template <typename T, int VEC>
__global__ void __launch_bounds__(kTileCols* kTileRows)
    bias_grad_partials_kernel(const T* dy, int64_t rows, int cols, float* partials) {
  const int c = (blockIdx.x * kTileCols + threadIdx.x) * VEC;
  const bool in = c < cols;
  float acc[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) acc[j] = 0.f;
  if (in) {
    // kRowsInFlight rows' loads issued before any is summed (the sums stay
    // in row order: the result does not depend on the unrolling).
    constexpr int kRowsInFlight = 4;
    const int64_t stride = static_cast<int64_t>(gridDim.y) * kTileRows;
    int64_t r = static_cast<int64_t>(blockIdx.y) * kTileRows + threadIdx.y;
    for (; r + (kRowsInFlight - 1) * stride < rows; r += kRowsInFlight * stride) {
      Pack<T, VEC> g[kRowsInFlight];
#pragma unroll
      for (int i = 0; i < kRowsInFlight; ++i) g[i] = load_pack<T, VEC>(dy + (r + i * stride) * cols + c);
#pragma unroll
      for (int i = 0; i < kRowsInFlight; ++i) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) acc[j] += to_float(g[i].v[j]);
      }
    }
    for (; r < rows; r += stride) {
      const Pack<T, VEC> g = load_pack<T, VEC>(dy + r * cols + c);
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] += to_float(g.v[j]);
    }
  }
  __shared__ float bias_row_sums[kTileRows][kTileCols * VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) bias_row_sums[threadIdx.y][threadIdx.x * VEC + j] = acc[j];
  __syncthreads();
  if (threadIdx.y != 0 || !in) return;
  float* out = partials + static_cast<int64_t>(blockIdx.y) * cols + c;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kTileRows; ++i) s += bias_row_sums[i][threadIdx.x * VEC + j];
    out[j] = s;
  }
}

}  // namespace
}  // namespace detail

size_t bias_grad_workspace_size(int64_t rows, int cols) {
  if (rows <= 0 || cols <= 0) return 0;
  const int64_t row_groups = std::min<int64_t>(detail::ceil_div(rows, detail::kTileRows), detail::kTileReduceBlocks);
  return static_cast<size_t>(row_groups) * cols * sizeof(float);
}

cudaError_t bias_grad(void* dbias, bool accumulate, void* workspace, size_t workspace_bytes, const void* dy,
                      int64_t rows, int cols, DType act_dtype, DType param_dtype, cudaStream_t stream) {
  using namespace detail;
  if (!dbias || !dy || rows < 0 || cols <= 0) return cudaErrorInvalidValue;
  if (rows > 0 && (!workspace || !aligned16(workspace) || workspace_bytes < bias_grad_workspace_size(rows, cols))) {
    return cudaErrorInvalidValue;
  }
  return dispatch_act_param(act_dtype, param_dtype, [&](auto act, auto param) -> cudaError_t {
    using T = typename decltype(act)::type;
    using W = typename decltype(param)::type;
    float* partials = static_cast<float*>(workspace);
    if (rows == 0) {
      // No rows: a sum of nothing (kept as it is when accumulating).
      return accumulate ? cudaSuccess : cudaMemsetAsync(dbias, 0, sizeof(W) * cols, stream);
    }
    auto launch = [&](auto vec_tag) {
      constexpr int kV = decltype(vec_tag)::value;
      const dim3 grid = tile_grid(rows, cols / kV, kTileReduceBlocks);
      bias_grad_partials_kernel<T, kV>
          <<<grid, tile_block(), 0, stream>>>(static_cast<const T*>(dy), rows, cols, partials);
      cudaError_t rc = launch_status();
      if (rc != cudaSuccess) return rc;
      return launch_reduce_column_partials<W>(partials, static_cast<int>(grid.y), cols, cols, static_cast<W*>(dbias),
                                              nullptr, accumulate, stream);
    };
    if (cols % kVec16<T> == 0 && aligned16(dy)) return launch(std::integral_constant<int, kVec16<T>>{});
    return launch(std::integral_constant<int, 1>{});
  });
}

}  // namespace dtrain::kernels
