// The grid of the elementwise kernels over [rows, cols]: blocks of 32 column
// vectors x 8 rows (a warp reads 32 consecutive vectors of one row). Plain
// elementwise kernels get a block per 8 rows (one vector per thread: the
// most loads in flight, measured fastest on an H100); kernels that also sum
// columns get a bounded number of row groups, each thread walking rows with
// a fixed stride, so that the partial sums stay few.
#pragma once

#include <algorithm>

#include "models/kernels/device_utils.cuh"

namespace dtrain::kernels::detail {

inline constexpr int kTileCols = 32;            // column vectors per block
inline constexpr int kTileRows = 8;             // rows per block and step
inline constexpr int kTileReduceBlocks = 1056;  // 8 blocks of 256 threads per multiprocessor of an H100/H200

// A pure function of the shape (gridDim.y is also the number of partial
// sums of a column reduction).
inline dim3 tile_grid(int64_t rows, int vectors_per_row, int max_blocks = 0) {
  const int gx = ceil_div(vectors_per_row, kTileCols);
  int64_t gy = std::min<int64_t>(ceil_div(rows, kTileRows), 65535);
  if (max_blocks > 0) gy = std::min<int64_t>(gy, std::max(1, max_blocks / gx));
  return dim3(gx, static_cast<unsigned>(gy));
}

inline dim3 tile_block() { return dim3(kTileCols, kTileRows); }

}  // namespace dtrain::kernels::detail
