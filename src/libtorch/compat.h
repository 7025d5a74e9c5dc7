// The one place where libtorch version differences live (floor 1, header
// only): data/, models/ and train/ compile against Debian's libtorch 1.13
// and the 2.x shipped with PyTorch, and share this header.
//
// The model zoo uses the torch::nn C++ API that is identical across 1.13
// and 2.x, plus causal attention (below); the other differences so far are
// train/'s autocast state functions and CUDA graph capture. A future
// difference goes here as a macro or inline shim guarded by
// DTRAIN_TORCH_AT_LEAST, never as an #if in a model or training file.
#pragma once

#include <torch/version.h>

#define DTRAIN_TORCH_AT_LEAST(major, minor)                   \
  (TORCH_VERSION_MAJOR > (major) ||                           \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

static_assert(DTRAIN_TORCH_AT_LEAST(1, 13),
              "dtrain needs libtorch 1.13 or newer");

// Autocast state per device type. libtorch 2.4 replaced the per-device
// functions (set_cpu_enabled, set_autocast_gpu_dtype, ...) with ones that take
// the device type (and deprecated the old ones); these shims call whichever
// this libtorch has. Only CPU and CUDA are supported here.
#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>

#include <optional>

namespace dtrain::compat {

inline bool isAutocastEnabled(c10::DeviceType device_type) {
#if DTRAIN_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device_type);
#else
  TORCH_CHECK(device_type == c10::DeviceType::CPU || device_type == c10::DeviceType::CUDA,
              "dtrain autocast supports cpu and cuda, not ", device_type);
  return device_type == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

inline void setAutocastEnabled(c10::DeviceType device_type, bool enabled) {
#if DTRAIN_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device_type, enabled);
#else
  TORCH_CHECK(device_type == c10::DeviceType::CPU || device_type == c10::DeviceType::CUDA,
              "dtrain autocast supports cpu and cuda, not ", device_type);
  if (device_type == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_enabled(enabled);
  }
#endif
}

inline at::ScalarType autocastDtype(c10::DeviceType device_type) {
#if DTRAIN_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device_type);
#else
  TORCH_CHECK(device_type == c10::DeviceType::CPU || device_type == c10::DeviceType::CUDA,
              "dtrain autocast supports cpu and cuda, not ", device_type);
  return device_type == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                             : at::autocast::get_autocast_gpu_dtype();
#endif
}

inline void setAutocastDtype(c10::DeviceType device_type, at::ScalarType dtype) {
#if DTRAIN_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(device_type, dtype);
#else
  TORCH_CHECK(device_type == c10::DeviceType::CPU || device_type == c10::DeviceType::CUDA,
              "dtrain autocast supports cpu and cuda, not ", device_type);
  if (device_type == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
#endif
}

// CPU autocast to float16 exists from libtorch 2.x on; 1.13's CPU autocast
// knows bfloat16 only (and its CPU kernels lack most float16 ops).
inline constexpr bool kCpuAutocastSupportsFp16 = DTRAIN_TORCH_AT_LEAST(2, 4);

}  // namespace dtrain::compat

// Causal scaled-dot-product attention, softmax(q kᵀ / sqrt(head dim) +
// causal mask) v, for q, k, v of [batch, heads, seq, head dim] (as many key
// heads as query heads). libtorch 2.x has the fused op (flash or
// memory-efficient kernels on CUDA); 1.13 gets the same mathematics spelled
// out, with the scores and softmax in float32 (double stays double) and
// autocast kept out so it cannot lower them, the result in q's dtype.
#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cmath>
#include <limits>

namespace dtrain::compat {

inline at::Tensor causalScaledDotProductAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if DTRAIN_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true);
#else
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const at::ScalarType compute = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const int64_t queries = q.size(-2), keys = k.size(-2);
  at::Tensor scores = at::matmul(q.to(compute), k.to(compute).transpose(-2, -1)) /
                      std::sqrt(static_cast<double>(q.size(-1)));
  // Query i sees keys 0..i: SDPA's is_causal mask (aligned top-left when
  // the lengths differ).
  const at::Tensor future = at::ones({queries, keys}, q.options().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), v.to(compute)).to(q.scalar_type());
#endif
}

// Scaled-dot-product attention under a boolean mask `allowed` (true: the
// query may read the key), broadcast to [batch, heads, queries, keys]; every
// query row must allow at least one key. Packed samples' block-diagonal
// causal mask goes through here. libtorch 2.x: SDPA with attn_mask (on CUDA
// its memory-efficient or math kernel: flash attention takes no mask); 1.13:
// the same mathematics spelled out as above.
inline at::Tensor maskedScaledDotProductAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                  const at::Tensor& allowed) {
#if DTRAIN_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, allowed, /*dropout_p=*/0.0, /*is_causal=*/false);
#else
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const at::ScalarType compute = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor scores = at::matmul(q.to(compute), k.to(compute).transpose(-2, -1)) /
                      std::sqrt(static_cast<double>(q.size(-1)));
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), v.to(compute)).to(q.scalar_type());
#endif
}

}  // namespace dtrain::compat

// CUDA graph capture (train/ only, in CUDA builds). libtorch 2.x lets the
// caller pick the capture mode; thread-local mode keeps other threads (the
// NCCL watchdog querying events) from invalidating a capture. 1.13 always
// captures in global mode.
#if defined(DTRAIN_TORCH_CUDA)
#include <ATen/cuda/CUDAGraph.h>

namespace dtrain::compat {

inline void beginGraphCapture(at::cuda::CUDAGraph& graph) {
#if DTRAIN_TORCH_AT_LEAST(2, 0)
  graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
#else
  graph.capture_begin();
#endif
}

}  // namespace dtrain::compat
#endif

// Where a leaf's tensor hooks (Tensor::register_hook) run: from 2.1 as the
// accumulator node's tensor pre-hooks, before its function pre-hooks; in
// 1.13 inside AccumulateGrad, after them. A function pre-hook that takes
// the gradient away from the accumulator would skip them there.
namespace dtrain::compat {
inline constexpr bool kTensorHooksBeforeAccumulatorPreHooks = DTRAIN_TORCH_AT_LEAST(2, 1);
}  // namespace dtrain::compat

// FP8 (e4m3 and e5m2) tensors and cuBLASLt's scaled matrix product. The
// float8 types came in libtorch 2.1; _scaled_mm took its present form
// (required scales, one tensor out) in 2.5, which is the floor here. Older
// libtorch: kHasScaledMm is false, and the shims must not be called.
namespace dtrain::compat {

inline constexpr bool kHasScaledMm = DTRAIN_TORCH_AT_LEAST(2, 5);

inline at::ScalarType float8E4m3() {
#if DTRAIN_TORCH_AT_LEAST(2, 5)
  return at::kFloat8_e4m3fn;
#else
  TORCH_CHECK(false, "float8 needs libtorch 2.5 or newer");
#endif
}

inline at::ScalarType float8E5m2() {
#if DTRAIN_TORCH_AT_LEAST(2, 5)
  return at::kFloat8_e5m2;
#else
  TORCH_CHECK(false, "float8 needs libtorch 2.5 or newer");
#endif
}

// (a · scale_a) x (b · scale_b) (+ bias) in out_dtype: a row-major [M, K],
// b column-major [K, N], both float8, the scales float32 scalars (the
// inverses of the casts' scales), bias [N] of out_dtype or undefined;
// fast_accum: cuBLASLt's faster, less exact FP8 accumulation.
inline at::Tensor scaledMm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                           const at::Tensor& scale_b, const at::Tensor& bias, at::ScalarType out_dtype,
                           bool fast_accum) {
#if DTRAIN_TORCH_AT_LEAST(2, 5)
  std::optional<at::Tensor> with_bias;
  if (bias.defined()) with_bias = bias;
  return at::_scaled_mm(a, b, scale_a, scale_b, with_bias, /*scale_result=*/std::nullopt, out_dtype, fast_accum);
#else
  (void)a, (void)b, (void)scale_a, (void)scale_b, (void)bias, (void)out_dtype, (void)fast_accum;
  TORCH_CHECK(false, "scaled matrix products need libtorch 2.5 or newer");
#endif
}

// scaledMm written into `out` (row-major, contiguous, of the dtype wanted):
// a product that lands straight where its result is kept.
inline void scaledMmOut(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                        const at::Tensor& scale_b, bool fast_accum) {
#if DTRAIN_TORCH_AT_LEAST(2, 5)
  at::_scaled_mm_out(out, a, b, scale_a, scale_b, /*bias=*/std::nullopt, /*scale_result=*/std::nullopt,
                     out.scalar_type(), fast_accum);
#else
  (void)out, (void)a, (void)b, (void)scale_a, (void)scale_b, (void)fast_accum;
  TORCH_CHECK(false, "scaled matrix products need libtorch 2.5 or newer");
#endif
}

}  // namespace dtrain::compat

// Matrix products of 16-bit operands written into a float32 tensor (a
// weight gradient into its fp32 buffer). libtorch 2.9 and newer: cuBLAS
// writes the fp32 result itself (mm/baddbmm with out_dtype, CUDA only; they
// came in 2.8), and `accumulate` adds it to what `out` holds in the same
// product (beta 1);
// older libtorch, or a CPU tensor: the product in the operands' dtype, then
// cast into or added to `out`. Operands of out's dtype: mm_out / addmm_.
namespace dtrain::compat {

inline constexpr bool kHasMmOutDtype = DTRAIN_TORCH_AT_LEAST(2, 9);

inline void productInto(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, bool accumulate) {
  if (a.scalar_type() == out.scalar_type()) {
    if (accumulate) {
      out.addmm_(a, b);
    } else {
      at::mm_out(out, a, b);
    }
    return;
  }
#if DTRAIN_TORCH_AT_LEAST(2, 9)
  if (out.is_cuda() && out.scalar_type() == at::kFloat &&
      (a.scalar_type() == at::kBFloat16 || a.scalar_type() == at::kHalf)) {
    if (accumulate) {
      // baddbmm's dtype variant adds to `out` itself (addmm's wants a
      // 16-bit input to add): one batch of one product.
      at::Tensor out3 = out.unsqueeze(0);
      at::baddbmm_out(out3, out3, a.unsqueeze(0), b.unsqueeze(0), at::kFloat, /*beta=*/1, /*alpha=*/1);
    } else {
      at::mm_out(out, a, b, at::kFloat);
    }
    return;
  }
#endif
  if (accumulate) {
    out.add_(at::mm(a, b));
  } else {
    out.copy_(at::mm(a, b));
  }
}

// Causal attention with fewer key/value heads than query heads (grouped
// queries: each key/value head serves heads(q) / heads(k) consecutive query
// heads), without widening k and v first: SDPA's enable_gqa (libtorch 2.5
// and newer). Older libtorch: kHasNativeGqa is false, and this must not be
// called.
inline constexpr bool kHasNativeGqa = DTRAIN_TORCH_AT_LEAST(2, 5);

inline at::Tensor causalGroupedQueryAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if DTRAIN_TORCH_AT_LEAST(2, 5)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                          /*scale=*/std::nullopt, /*enable_gqa=*/true);
#else
  (void)q, (void)k, (void)v;
  TORCH_CHECK(false, "grouped-query attention without widening needs libtorch 2.5 or newer");
#endif
}

}  // namespace dtrain::compat
