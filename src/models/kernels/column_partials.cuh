// The deterministic second pass of the parameter-gradient reductions
// (dweight/dbias of the norms, dbias of bias-GELU): a first kernel leaves
// one fp32 partial sum per block in a caller-owned workspace laid out as
// [num_partials][width]; this pass sums each column over the partials in a
// fixed order and writes (or adds to) the parameter gradient.
#pragma once

#include "models/kernels/device_utils.cuh"

namespace dtrain::kernels::detail {

inline constexpr int kPartialColumns = 32;  // columns per block of the pass
inline constexpr int kPartialLanes = 16;    // partials summed in parallel per column

// Columns [0, cols) go to out0, [cols, width) to out1 (either may be null).
template <typename W>
__global__ void __launch_bounds__(kPartialColumns* kPartialLanes)
    reduce_column_partials(const float* partials, int num_partials, int width, int cols, W* out0, W* out1,
                           bool accumulate) {
  __shared__ float lane_sums[kPartialLanes][kPartialColumns + 1];
  const int col = blockIdx.x * kPartialColumns + threadIdx.x;
  float s = 0.f;
  if (col < width) {
    for (int p = threadIdx.y; p < num_partials; p += kPartialLanes) {
      s += partials[static_cast<int64_t>(p) * width + col];
    }
  }
  lane_sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || col >= width) return;
  float total = 0.f;
#pragma unroll
  for (int l = 0; l < kPartialLanes; ++l) total += lane_sums[l][threadIdx.x];
  W* out = col < cols ? out0 + col : (out1 ? out1 + (col - cols) : nullptr);
  if (col < cols && !out0) return;
  if (!out) return;
  *out = from_float<W>(accumulate ? to_float(*out) + total : total);
}

template <typename W>
cudaError_t launch_reduce_column_partials(const float* partials, int num_partials, int width, int cols, W* out0,
                                          W* out1, bool accumulate, cudaStream_t stream) {
  dim3 block(kPartialColumns, kPartialLanes);
  dim3 grid(ceil_div(width, kPartialColumns));
  reduce_column_partials<W><<<grid, block, 0, stream>>>(partials, num_partials, width, cols, out0, out1, accumulate);
  return launch_status();
}

}  // namespace dtrain::kernels::detail
