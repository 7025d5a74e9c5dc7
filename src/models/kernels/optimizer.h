// Fused optimizer kernels over flat fp32 slabs (include/dtrain/optim.h's
// FlatSlab): the whole AdamW update of a slab in one pass, and the squared L2
// norm of a slab for gradient clipping. Both only enqueue work and read their
// scalars (lr, step count, scale) on the device, so they can be captured into
// a CUDA graph and replayed with the values the host wrote before each replay.
//
// AdamW, per element i of a slab of n, all arithmetic fp32, in the order of
// torch.optim.AdamW (capturable, single-tensor):
//   g  = grad[i] * (*grad_scale)                  (g = grad[i] when grad_scale is null)
//   p  = param[i] * (1 - lr * weight_decay)       (skipped when weight_decay == 0)
//   m  = lerp(exp_avg[i], g, 1 - beta1)           (torch's lerp: m + w (g - m) when w < 0.5,
//                                                  else g - (g - m)(1 - w))
//   v  = exp_avg_sq[i] * beta2 + (1 - beta2) * g * g
//   bias_correction1 = 1 - powf(beta1, step),  bias_correction2 = 1 - powf(beta2, step)
//   param[i] = p - (lr / bias_correction1) * (m / (sqrt(v) / sqrt(bias_correction2) + eps))
//   exp_avg[i] = m, exp_avg_sq[i] = v
// lr and step are fp32 scalars on the device: the optimizer's lr tensor and
// its step count, already counting this step (the caller adds 1 before the
// first slab). 1 - beta1 and 1 - beta2 are computed in double on the host
// and rounded, as Python computes them. A slab exempt from weight decay is
// called with weight_decay = 0. grad is only read. grad_scale multiplies the
// gradient without a pass of its own (a clip coefficient or an inverse loss
// scale computed on the device).
//
// Squared norm: *out = sum_i x[i]^2 (fp64 out; each square and every sum in
// fp64), or *out += that sum with accumulate (chain the slabs of one norm in
// a fixed order). A first kernel of a fixed number of blocks (a function of
// n alone, never of the device) leaves one partial sum per block in the
// workspace; a second, one block, adds them in order. No atomics: the same
// input gives the same bits on every run and every GPU model.
//
// Vectorised (16-byte) accesses when every pointer of the call is 16-byte
// aligned; otherwise a scalar path with the same results. Aliasing: none of
// param, grad, exp_avg, exp_avg_sq may overlap another.
#pragma once

#include <utility>
#include <vector>

#include "models/kernels/kernel_types.h"

namespace dtrain::kernels {

struct AdamWTile;

struct AdamWArgs {
  float* param = nullptr;       // [n], updated in place
  const float* grad = nullptr;  // [n]
  float* exp_avg = nullptr;     // [n], updated in place
  float* exp_avg_sq = nullptr;  // [n], updated in place
  int64_t n = 0;
  const float* lr = nullptr;          // [1], device
  const float* step = nullptr;        // [1], device: steps taken, this one included (>= 1)
  const float* grad_scale = nullptr;  // [1], device, or null (no scaling)
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // 0 for slabs exempt from decay
  // Optional: the absolute maximum of each of some ranges of the updated
  // param (for the FP8 casts of the weights in the next forward, which then
  // read each weight once: models/fp8_linear.h's noteAbsoluteMaximum).
  // tiles: `tile_count` tiles (adamw_tiles) covering [0, n) in order;
  // amax_bits[r] receives the bit pattern of max |param[i]| over range r
  // as written (non-negative float32s order as their bit patterns, a NaN
  // above infinity). The call zeroes amax_bits[0 .. ranges) first.
  const AdamWTile* tiles = nullptr;  // device
  int64_t tile_count = 0;
  uint32_t* amax_bits = nullptr;  // device, [ranges]
  int64_t ranges = 0;
};

// The tiles of a slab of n elements with ranges [begin, end) (sorted, not
// overlapping, within [0, n)) whose maxima adamw_step keeps: every element
// in one tile, each tile in one range (its index) or in none (-1), at most
// kAdamWTileElements long. Host code; the caller copies them to the device.
struct AdamWTile {
  int64_t begin;
  int64_t end;
  int64_t range;
};
inline constexpr int64_t kAdamWTileElements = 16384;
std::vector<AdamWTile> adamw_tiles(int64_t n, const std::vector<std::pair<int64_t, int64_t>>& ranges);

cudaError_t adamw_step(const AdamWArgs& args, cudaStream_t stream);

// Bytes of workspace squared_norm needs for n elements (8 per block).
size_t squared_norm_workspace_size(int64_t n);

cudaError_t squared_norm(double* out, bool accumulate, const float* x, int64_t n, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream);

}  // namespace dtrain::kernels
