// Forward of the fused residual add + LayerNorm / RMSNorm (normalization.h).

#include <type_traits>

#include "models/kernels/normalization.h"
#include "models/kernels/row_layout.cuh"

namespace dtrain::kernels {
namespace detail {
namespace {

// x in U (the activation dtype T, or bf16 under an fp32 stream), the
// residual stream in T.
template <typename T, typename U, int VEC, int ITEMS>
struct ForwardRow {
  Pack<U, VEC> x[ITEMS];
  Pack<T, VEC> res[ITEMS];
};

template <typename T, typename U, int VEC, int ITEMS>
__device__ __forceinline__ void load_forward_row(const NormForwardArgs& a, int64_t row, int tpr, int t,
                                                 ForwardRow<T, U, VEC, ITEMS>& in) {
  if (row >= a.rows) return;
  const int64_t off = row * a.cols;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int c = (k * tpr + t) * VEC;
    if (c >= a.cols) continue;
    in.x[k] = load_pack<U, VEC>(static_cast<const U*>(a.x) + off + c);
    if (a.residual) in.res[k] = load_pack<T, VEC>(static_cast<const T*>(a.residual) + off + c);
  }
}

// Persistent: each row group walks rows base + slot, base += gridDim.x *
// rows_per_block, loading the next row while it normalises this one; the
// weight and bias stay in registers. T: the residual stream's dtype (the
// activation dtype), U: x's, Y: y's (each T, or bf16 under an fp32 stream).
// AMAX: each thread keeps max |y| over what it stored, and each warp folds
// it into a.y_amax_bits once, at the end (every thread gets there: the
// loop has no early exit, its row sums hold barriers).
template <typename T, typename U, typename Y, typename W, int VEC, int ITEMS, bool RMS, bool AMAX>
__global__ void __launch_bounds__(kMaxRowThreads) norm_forward_kernel(NormForwardArgs a, int tpr, int rows_per_block) {
  __shared__ float2 scratch[32];
  const int slot = threadIdx.x / tpr;
  const int t = threadIdx.x - slot * tpr;
  const int cols = a.cols;
  const W* weight = static_cast<const W*>(a.weight);
  const W* bias = static_cast<const W*>(a.bias);
  Raw<W, VEC> wp[ITEMS], bp[ITEMS];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int c = (k * tpr + t) * VEC;
    if (c >= cols) continue;
    load_raw<W, VEC>(weight + c, wp[k]);
    if (bias) load_raw<W, VEC>(bias + c, bp[k]);
  }
  const int64_t step = static_cast<int64_t>(gridDim.x) * rows_per_block;
  uint32_t y_amax = 0;
  ForwardRow<T, U, VEC, ITEMS> cur;
  load_forward_row<T, U, VEC, ITEMS>(a, static_cast<int64_t>(blockIdx.x) * rows_per_block + slot, tpr, t, cur);
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * rows_per_block; base < a.rows; base += step) {
    const int64_t row = base + slot;
    const bool valid = row < a.rows;
    ForwardRow<T, U, VEC, ITEMS> next;
    load_forward_row<T, U, VEC, ITEMS>(a, row + step, tpr, t, next);
    const int64_t off = valid ? row * cols : 0;
    T* res_out = a.residual_out ? static_cast<T*>(a.residual_out) + off : nullptr;
    float h[ITEMS][VEC];
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int c = (k * tpr + t) * VEC;
      const bool in = valid && c < cols;
      Pack<T, VEC> stream;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        float v = 0.f;
        if (in) {
          // Round the sum to the stream's dtype: the norm sees what backward reads.
          v = a.residual ? to_float(from_float<T>(to_float(cur.x[k].v[j]) + to_float(cur.res[k].v[j])))
                         : to_float(cur.x[k].v[j]);
        }
        stream.v[j] = from_float<T>(v);
        h[k][j] = v;
        sum += v;
      }
      if (in && res_out) store_pack<T, VEC>(res_out + c, stream);
    }
    // Two passes over the registers: the mean, then the squared deviations.
    float mean = 0.f;
    if (!RMS) mean = row_sum(sum, tpr, scratch) / cols;
    float sq = 0.f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const bool in = valid && (k * tpr + t) * VEC < cols;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float d = h[k][j] - mean;
        sq += in ? d * d : 0.f;
      }
    }
    const float rstd = rsqrtf(row_sum(sq, tpr, scratch) / cols + a.eps);
    if (valid) {
      if (t == 0) {
        if (!RMS && a.mean) a.mean[row] = mean;
        if (a.rstd) a.rstd[row] = rstd;
      }
      Y* y = static_cast<Y*>(a.y) + off;
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const int c = (k * tpr + t) * VEC;
        if (c >= cols) continue;
        float out[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          out[j] = (h[k][j] - mean) * rstd * to_float(wp[k].v[j]) + (bias ? to_float(bp[k].v[j]) : 0.f);
          // The value as stored: rounded to Y as store_floats rounds it.
          if constexpr (AMAX) y_amax = max(y_amax, abs_bits(to_float(from_float<Y>(out[j]))));
        }
        store_floats<Y, VEC>(y + c, out);
      }
    }
    cur = next;
  }
  if constexpr (AMAX) note_warp_amax(y_amax, a.y_amax_bits);
}

template <typename T, typename U, typename Y, typename W, int VEC, bool RMS, bool AMAX>
cudaError_t launch_norm_forward(const NormForwardArgs& a, const RowLayout& l, cudaStream_t stream) {
  // As many blocks as fit at once (2048 threads per multiprocessor); the
  // grid only bounds the work per block, so it needs no occupancy query.
  const int blocks = std::min<int64_t>(ceil_div(a.rows, l.rows_per_block),
                                       static_cast<int64_t>(multiprocessor_count()) * (2048 / l.threads()));
  const dim3 block(l.threads());
  switch (l.items) {
    case 1:
      norm_forward_kernel<T, U, Y, W, VEC, 1, RMS, AMAX><<<blocks, block, 0, stream>>>(a, l.tpr, l.rows_per_block);
      break;
    case 2:
      norm_forward_kernel<T, U, Y, W, VEC, 2, RMS, AMAX><<<blocks, block, 0, stream>>>(a, l.tpr, l.rows_per_block);
      break;
    case 3:
      norm_forward_kernel<T, U, Y, W, VEC, 3, RMS, AMAX><<<blocks, block, 0, stream>>>(a, l.tpr, l.rows_per_block);
      break;
    case 4:
      norm_forward_kernel<T, U, Y, W, VEC, 4, RMS, AMAX><<<blocks, block, 0, stream>>>(a, l.tpr, l.rows_per_block);
      break;
    default:
      if constexpr (VEC != 1) return cudaErrorInvalidValue;  // choose_row_layout gives 8 only when VEC == 1
      norm_forward_kernel<T, U, Y, W, 1, 8, RMS, AMAX><<<blocks, block, 0, stream>>>(a, l.tpr, l.rows_per_block);
      break;
  }
  return launch_status();
}

template <bool RMS>
cudaError_t norm_forward(const NormForwardArgs& a, cudaStream_t stream) {
  if (!a.x || !a.y || !a.weight || a.rows < 0 || a.cols <= 0 || (RMS && a.bias)) return cudaErrorInvalidValue;
  if (a.rows == 0) return cudaSuccess;
  if ((a.bf16_x || a.bf16_y) && a.act_dtype != DType::kFloat32) return cudaErrorInvalidValue;
  return dispatch_act_param(a.act_dtype, a.param_dtype, [&](auto act, auto param) -> cudaError_t {
    using T = typename decltype(act)::type;
    using W = typename decltype(param)::type;
    constexpr int kVec = kVec16<T>;
    const bool vec = a.cols % kVec == 0 && aligned16(a.x) && aligned16(a.residual) && aligned16(a.y) &&
                     aligned16(a.residual_out) && aligned16(a.weight) && aligned16(a.bias);
    RowLayout l;
    // One 16-byte access per thread and row where the row allows (more
    // threads, more rows in flight: measured fastest on an H100).
    const int preferred = vec ? 1 : 4;
    if (!choose_row_layout(a.cols, vec ? kVec : 1, preferred, &l)) return cudaErrorInvalidValue;
    auto launch = [&](auto x_tag, auto y_tag) -> cudaError_t {
      using U = typename decltype(x_tag)::type;
      using Y = typename decltype(y_tag)::type;
      if (a.y_amax_bits) {
        return vec ? launch_norm_forward<T, U, Y, W, kVec, RMS, true>(a, l, stream)
                   : launch_norm_forward<T, U, Y, W, 1, RMS, true>(a, l, stream);
      }
      return vec ? launch_norm_forward<T, U, Y, W, kVec, RMS, false>(a, l, stream)
                 : launch_norm_forward<T, U, Y, W, 1, RMS, false>(a, l, stream);
    };
    if constexpr (std::is_same_v<T, float>) {
      if (a.bf16_x) return a.bf16_y ? launch(TypeTag<bf16>{}, TypeTag<bf16>{}) : launch(TypeTag<bf16>{}, TypeTag<T>{});
      if (a.bf16_y) return launch(TypeTag<T>{}, TypeTag<bf16>{});
    }
    return launch(TypeTag<T>{}, TypeTag<T>{});
  });
}

}  // namespace
}  // namespace detail

cudaError_t layer_norm_forward(const NormForwardArgs& args, cudaStream_t stream) {
  return detail::norm_forward<false>(args, stream);
}

cudaError_t rms_norm_forward(const NormForwardArgs& args, cudaStream_t stream) {
  return detail::norm_forward<true>(args, stream);
}

}  // namespace dtrain::kernels
