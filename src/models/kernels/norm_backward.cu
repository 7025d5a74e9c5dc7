// Backward of the fused residual add + LayerNorm / RMSNorm (normalization.h).
#include <algorithm>
#include <type_traits>

#include "models/kernels/column_partials.cuh"
#include "models/kernels/normalization.h"
#include "models/kernels/row_layout.cuh"

namespace dtrain::kernels {
namespace detail {
namespace {

// Blocks of the persistent backward kernel: a fixed number (not read off the
// device), so the workspace and the summation order, hence the bits of
// dweight/dbias, depend on the shape alone. 264 = 2 blocks on each of the 132
// multiprocessors of an H100/H200: what fits at once with ~100 registers per
// thread, so all run in one wave (measured: 264 beat 396, 528 and 1056).
constexpr int kNormBackwardMaxBlocks = 264;

int norm_backward_blocks(int64_t rows, int rows_per_block) {
  return static_cast<int>(std::min<int64_t>(ceil_div(rows, rows_per_block), kNormBackwardMaxBlocks));
}

// One row's inputs in registers (dy, x, dresidual packs and the statistics).
// dy in D (the activation dtype T, or bf16 under an fp32 stream).
template <typename T, typename D, int VEC, int ITEMS>
struct RowInputs {
  Pack<D, VEC> dy[ITEMS];
  Pack<T, VEC> x[ITEMS], dres[ITEMS];
  float mean = 0.f, rstd = 0.f;
};

template <typename T, typename D, int VEC, int ITEMS, bool RMS>
__device__ __forceinline__ void load_row(const NormBackwardArgs& a, int64_t row, int tpr, int t,
                                         RowInputs<T, D, VEC, ITEMS>& in) {
  if (row >= a.rows) return;
  const int64_t off = row * a.cols;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int c = (k * tpr + t) * VEC;
    if (c >= a.cols) continue;
    in.dy[k] = load_pack<D, VEC>(static_cast<const D*>(a.dy) + off + c);
    in.x[k] = load_pack<T, VEC>(static_cast<const T*>(a.x) + off + c);
    if (a.dresidual) in.dres[k] = load_pack<T, VEC>(static_cast<const T*>(a.dresidual) + off + c);
  }
  if (!RMS) in.mean = a.mean[row];
  in.rstd = a.rstd[row];
}

// Each row group walks rows base + slot, base += gridDim.x * rows_per_block,
// loading the next row while it works on this one and keeping its
// dweight/dbias sums in registers; the groups of a block then add up in slot
// order, and the block writes one partial row of [dweight | dbias] (2 * cols
// floats) to `partials` (null: no parameter gradients). dx is also written
// as bf16 to a.dx_bf16 when that is set (T fp32 only).
template <typename T, typename D, typename W, int VEC, int ITEMS, bool RMS>
__global__ void __launch_bounds__(kMaxRowThreads)
    norm_backward_kernel(NormBackwardArgs a, int tpr, int rows_per_block, float* partials) {
  extern __shared__ float slot_sums[];  // [2 * cols] when rows_per_block > 1
  __shared__ float2 scratch[32];
  const int slot = threadIdx.x / tpr;
  const int t = threadIdx.x - slot * tpr;
  const int cols = a.cols;
  const float inv_cols = 1.f / cols;
  const W* weight = static_cast<const W*>(a.weight);
  float dw[ITEMS][VEC], db[ITEMS][VEC];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) dw[k][j] = db[k][j] = 0.f;
  }

  const int64_t step = static_cast<int64_t>(gridDim.x) * rows_per_block;
  RowInputs<T, D, VEC, ITEMS> cur;
  load_row<T, D, VEC, ITEMS, RMS>(a, static_cast<int64_t>(blockIdx.x) * rows_per_block + slot, tpr, t, cur);
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * rows_per_block; base < a.rows; base += step) {
    const int64_t row = base + slot;
    const bool valid = row < a.rows;
    RowInputs<T, D, VEC, ITEMS> next;
    load_row<T, D, VEC, ITEMS, RMS>(a, row + step, tpr, t, next);
    const float mean = cur.mean, rstd = cur.rstd;
    // g = dy * weight; the row needs sum(g) and sum(g * hhat).
    float2 s = make_float2(0.f, 0.f);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int c = (k * tpr + t) * VEC;
      if (!(valid && c < cols)) continue;
      float w[VEC];
      load_floats<W, VEC>(weight + c, w);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float g = to_float(cur.dy[k].v[j]) * w[j];
        s.x += g;
        s.y += g * (to_float(cur.x[k].v[j]) - mean) * rstd;
      }
    }
    s = row_sum2(s, tpr, scratch);
    const float mean_g = RMS ? 0.f : s.x * inv_cols;
    const float mean_gh = s.y * inv_cols;
    T* dx = static_cast<T*>(a.dx) + (valid ? row * cols : 0);
    bf16* dx_bf16 = a.dx_bf16 ? static_cast<bf16*>(a.dx_bf16) + (valid ? row * cols : 0) : nullptr;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int c = (k * tpr + t) * VEC;
      if (!(valid && c < cols)) continue;
      float w[VEC], out[VEC];
      load_floats<W, VEC>(weight + c, w);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float d = to_float(cur.dy[k].v[j]);
        const float hhat = (to_float(cur.x[k].v[j]) - mean) * rstd;
        out[j] = (d * w[j] - mean_g - hhat * mean_gh) * rstd + (a.dresidual ? to_float(cur.dres[k].v[j]) : 0.f);
        dw[k][j] += d * hhat;
        db[k][j] += d;
      }
      store_floats<T, VEC>(dx + c, out);
      if constexpr (std::is_same_v<T, float>) {
        if (dx_bf16) store_floats<bf16, VEC>(dx_bf16 + c, out);
      }
    }
    cur = next;
  }
  if (!partials) return;

  // Row groups of the block, added in slot order.
  for (int s = 1; s < rows_per_block; ++s) {
    if (slot == s) {
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const int c = (k * tpr + t) * VEC;
        if (c >= cols) continue;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          slot_sums[c + j] = dw[k][j];
          slot_sums[cols + c + j] = db[k][j];
        }
      }
    }
    __syncthreads();
    if (slot == 0) {
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const int c = (k * tpr + t) * VEC;
        if (c >= cols) continue;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          dw[k][j] += slot_sums[c + j];
          db[k][j] += slot_sums[cols + c + j];
        }
      }
    }
    __syncthreads();
  }
  if (slot != 0) return;
  float* out = partials + static_cast<int64_t>(blockIdx.x) * 2 * cols;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int c = (k * tpr + t) * VEC;
    if (c >= cols) continue;
    store_floats<float, VEC>(out + c, dw[k]);
    store_floats<float, VEC>(out + cols + c, db[k]);
  }
}

template <typename T, typename D, typename W, int VEC, bool RMS>
cudaError_t launch_norm_backward(const NormBackwardArgs& a, const RowLayout& l, cudaStream_t stream) {
  const int blocks = norm_backward_blocks(a.rows, l.rows_per_block);
  const bool params = a.dweight || a.dbias;
  float* partials = params ? static_cast<float*>(a.workspace) : nullptr;
  const size_t smem = params && l.rows_per_block > 1 ? 2 * sizeof(float) * a.cols : 0;
  const dim3 block(l.threads());
  switch (l.items) {
    case 1:
      norm_backward_kernel<T, D, W, VEC, 1, RMS><<<blocks, block, smem, stream>>>(a, l.tpr, l.rows_per_block, partials);
      break;
    case 2:
      norm_backward_kernel<T, D, W, VEC, 2, RMS><<<blocks, block, smem, stream>>>(a, l.tpr, l.rows_per_block, partials);
      break;
    case 3:
      norm_backward_kernel<T, D, W, VEC, 3, RMS><<<blocks, block, smem, stream>>>(a, l.tpr, l.rows_per_block, partials);
      break;
    case 4:
      norm_backward_kernel<T, D, W, VEC, 4, RMS><<<blocks, block, smem, stream>>>(a, l.tpr, l.rows_per_block, partials);
      break;
    default:
      if constexpr (VEC != 1) return cudaErrorInvalidValue;  // choose_row_layout gives 8 only when VEC == 1
      norm_backward_kernel<T, D, W, 1, 8, RMS><<<blocks, block, smem, stream>>>(a, l.tpr, l.rows_per_block, partials);
      break;
  }
  cudaError_t rc = launch_status();
  if (rc != cudaSuccess || !params) return rc;
  return launch_reduce_column_partials<W>(partials, blocks, 2 * a.cols, a.cols, static_cast<W*>(a.dweight),
                                          static_cast<W*>(a.dbias), a.accumulate, stream);
}

template <bool RMS>
cudaError_t norm_backward(const NormBackwardArgs& a, cudaStream_t stream) {
  if (!a.dy || !a.x || !a.weight || !a.rstd || !a.dx || (!RMS && !a.mean) || (RMS && a.dbias) || a.rows < 0 ||
      a.cols <= 0) {
    return cudaErrorInvalidValue;
  }
  const bool params = a.dweight || a.dbias;
  if (params &&
      (!a.workspace || !aligned16(a.workspace) || a.workspace_bytes < norm_backward_workspace_size(a.rows, a.cols))) {
    return cudaErrorInvalidValue;
  }
  if ((a.bf16_dy || a.dx_bf16) && a.act_dtype != DType::kFloat32) return cudaErrorInvalidValue;
  if (a.rows == 0) return cudaSuccess;
  return dispatch_act_param(a.act_dtype, a.param_dtype, [&](auto act, auto param) -> cudaError_t {
    using T = typename decltype(act)::type;
    using W = typename decltype(param)::type;
    constexpr int kVec = kVec16<T>;
    const bool vec = a.cols % kVec == 0 && aligned16(a.dy) && aligned16(a.x) && aligned16(a.weight) &&
                     aligned16(a.dresidual) && aligned16(a.dx) && aligned16(a.dx_bf16);
    RowLayout l;
    // Few items per thread: the next row's inputs are in registers too.
    const int preferred = !vec ? 4 : kVec == 8 ? 1 : 2;
    if (!choose_row_layout(a.cols, vec ? kVec : 1, preferred, &l)) return cudaErrorInvalidValue;
    auto launch = [&](auto dy_tag) -> cudaError_t {
      using D = typename decltype(dy_tag)::type;
      return vec ? launch_norm_backward<T, D, W, kVec, RMS>(a, l, stream)
                 : launch_norm_backward<T, D, W, 1, RMS>(a, l, stream);
    };
    if constexpr (std::is_same_v<T, float>) {
      if (a.bf16_dy) return launch(TypeTag<bf16>{});
    }
    return launch(TypeTag<T>{});
  });
}

}  // namespace
}  // namespace detail

size_t norm_backward_workspace_size(int64_t rows, int cols) {
  if (rows <= 0 || cols <= 0) return 0;
  const int64_t blocks = std::min<int64_t>(rows, detail::kNormBackwardMaxBlocks);
  return static_cast<size_t>(blocks) * 2 * cols * sizeof(float);
}

cudaError_t layer_norm_backward(const NormBackwardArgs& args, cudaStream_t stream) {
  return detail::norm_backward<false>(args, stream);
}

cudaError_t rms_norm_backward(const NormBackwardArgs& args, cudaStream_t stream) {
  return detail::norm_backward<true>(args, stream);
}

}  // namespace dtrain::kernels
