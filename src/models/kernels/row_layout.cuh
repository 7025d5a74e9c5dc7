// How the norm kernels spread a row over threads: each row is handled by a
// group of `tpr` threads (a multiple of 32), each thread owning up to ITEMS
// vectors of VEC columns at column (k * tpr + t) * VEC, k < ITEMS, so a warp
// reads 32 consecutive vectors per item. A block holds `rows_per_block`
// such groups (256 threads in all, or one group of up to 512 threads).
// ITEMS is at most 4 on the vector path (registers) and 8 on the scalar one.
#pragma once

#include "models/kernels/device_utils.cuh"

namespace dtrain::kernels::detail {

struct RowLayout {
  int vec = 1;             // columns per access
  int items = 1;           // accesses per thread per row (1, 2, 3, 4; 8 when vec == 1)
  int tpr = 32;            // threads per row
  int rows_per_block = 8;  // row groups per block
  int threads() const { return tpr * rows_per_block; }
};

inline constexpr int kMaxRowThreads = 512;

// False when cols is not a multiple of vec or the row is too long. Picks,
// among 1..preferred_items accesses per thread, the layout that leaves the
// fewest lanes idle (ties: more items, so fewer warps per row and fewer
// barriers); rows too long for that within 512 threads get more items (up
// to 4 on the vector path, 8 on the scalar one: ITEMS in {1, 2, 3, 4, 8}).
inline bool choose_row_layout(int cols, int vec, int preferred_items, RowLayout* out) {
  if (cols <= 0 || cols % vec != 0) return false;
  const int nvec = cols / vec;
  auto threads_for = [&](int items) { return (ceil_div(nvec, items) + 31) / 32 * 32; };
  RowLayout l;
  l.vec = vec;
  l.items = 0;
  int best_waste = 0;
  for (int items = 1; items <= preferred_items; ++items) {
    const int tpr = threads_for(items);
    const int waste = tpr * items - nvec;
    if (tpr <= kMaxRowThreads && (l.items == 0 || waste <= best_waste)) {
      l.items = items;
      l.tpr = tpr;
      best_waste = waste;
    }
  }
  if (l.items == 0) {
    for (int items : {2, 4, 8}) {
      if (items > (vec == 1 ? 8 : 4) || items <= preferred_items) continue;
      if (threads_for(items) <= kMaxRowThreads) {
        l.items = items;
        l.tpr = threads_for(items);
        break;
      }
    }
    if (l.items == 0) return false;
  }
  l.rows_per_block = l.tpr >= 256 ? 1 : 256 / l.tpr;
  *out = l;
  return true;
}

// Sums over the tpr threads of each row group. Every thread of the block
// must call it (it holds __syncthreads when a row spans several warps);
// every thread of a group gets the same value, summed in a fixed order.
__device__ __forceinline__ float2 row_sum2(float2 v, int tpr, float2* scratch /* [32] */) {
  v.x = warp_sum(v.x);
  v.y = warp_sum(v.y);
  if (tpr == 32) return v;
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  const int warps = tpr >> 5;
  const int first = (threadIdx.x / tpr) * warps;
  float2 s = make_float2(0.f, 0.f);
  for (int i = 0; i < warps; ++i) {
    s.x += scratch[first + i].x;
    s.y += scratch[first + i].y;
  }
  __syncthreads();
  return s;
}

__device__ __forceinline__ float row_sum(float v, int tpr, float2* scratch) {
  return row_sum2(make_float2(v, 0.f), tpr, scratch).x;
}

}  // namespace dtrain::kernels::detail
