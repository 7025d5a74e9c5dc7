// Fused activations of the transformer MLP, forward and backward.
//
// Bias + GELU (GPT-2's MLP; the tanh approximation, torch's
// gelu(approximate="tanh")), over x of [rows, cols] and bias of [cols]:
//   h = x + bias (fp32, not rounded),  y = 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))
//   backward: dx = dy * gelu'(h);  dbias = sum over rows of dx (the fp32 values, before rounding)
// fp32 activations: computed as h * sigmoid(2 sqrt(2/pi) (h + 0.044715 h^3))
// (the same function, accurate also where 1 + tanh cancels); bf16
// activations: with the hardware tanh (relative error ~2^-11, under bf16's
// 2^-9), which the bf16 kernels are fast enough to notice.
// The torch side: forward with x = the fc matmul's output WITHOUT its bias
// (torch::mm, not addmm) and bias = the fc bias; save x and bias (not y: the
// backward recomputes h). Backward needs gelu_backward_workspace_size(rows,
// cols) bytes of workspace when dbias is wanted (per-block fp32 partial sums,
// reduced in a fixed order: deterministic). bias may be null (plain GELU;
// then dbias must be null too and no workspace is needed).
//
// SwiGLU (Llama's MLP): y = silu(a) * b, silu(a) = a * sigmoid(a), over
// [rows, ffn]. a and b are row-strided views, so both layouts work:
//   - one fused gate/up projection [rows, 2 * ffn] (gate in columns [0, ffn),
//     up in [ffn, 2 ffn)): a = base, b = base + ffn, in_row_stride = 2 * ffn;
//   - two tensors [rows, ffn]: a, b, in_row_stride = ffn.
// y is [rows, ffn] contiguous. Backward: da = dy * b * sigmoid(a) (1 + a (1 -
// sigmoid(a))), db = dy * silu(a), written with grad_row_stride (so da/db can
// fill one [rows, 2 * ffn] gradient buffer). Save a and b (or their packed
// buffer) for backward; nothing else.
//
// Absolute maxima beside the outputs (for FP8 casts of them, models/
// fp8_linear.h's noteAbsoluteMaximum): with amax_bits (forward, for y) or
// da_amax_bits / db_amax_bits (backward, for da and db; either may be
// null), a device uint32 that the caller zeroes before the call, the kernel
// leaves there the bit pattern of max |v| over the values v of that output
// as stored (rounded to the dtype): non-negative floats order as their
// bits, a NaN above infinity, so each warp's unsigned maximum goes in with
// one atomicMax. The maximum is order-free, so the result is deterministic
// despite the atomics. Without them (null, the default), the kernels are
// today's: the maximum is a separate instantiation, compiled out.
//
// Aliasing: dx may alias dy or x; da may alias a and db may alias b when the
// strides are equal; y may alias x (GELU). y must not overlap a or b unless
// it has their layout.
#pragma once

#include "models/kernels/kernel_types.h"

namespace dtrain::kernels {

cudaError_t gelu_forward(void* y, const void* x, const void* bias, int64_t rows, int cols, DType act_dtype,
                         DType param_dtype, cudaStream_t stream);

// dbias (param dtype, [cols]) may be null; with accumulate, dbias += instead of =.
// y (act dtype, [rows, cols]) may be null; if given, the forward's output
// is written there again, the same values gelu_forward writes (for a
// backward that recomputes it rather than keeping it from the forward).
cudaError_t gelu_backward(void* dx, void* dbias, bool accumulate, void* workspace, size_t workspace_bytes,
                          const void* dy, const void* x, const void* bias, int64_t rows, int cols, DType act_dtype,
                          DType param_dtype, cudaStream_t stream, void* y = nullptr);

size_t gelu_backward_workspace_size(int64_t rows, int cols);

// The bias gradient of a product y = x Wᵀ + bias: dbias (param dtype,
// [cols]) = the column sums of dy (act dtype, [rows, cols]), in fp32 and a
// fixed order (per-block partials in the workspace, then their sums), or
// added to dbias with accumulate. Needs bias_grad_workspace_size(rows,
// cols) bytes of 16-byte aligned workspace.
cudaError_t bias_grad(void* dbias, bool accumulate, void* workspace, size_t workspace_bytes, const void* dy,
                      int64_t rows, int cols, DType act_dtype, DType param_dtype, cudaStream_t stream);

size_t bias_grad_workspace_size(int64_t rows, int cols);

// amax_bits (device, one uint32, zeroed by the caller) or null: max |y| (above).
cudaError_t swiglu_forward(void* y, const void* a, const void* b, int64_t rows, int ffn, int64_t in_row_stride,
                           DType dtype, cudaStream_t stream, uint32_t* amax_bits = nullptr);

// da_amax_bits, db_amax_bits (each one zeroed device uint32, or null):
// max |da| and max |db| (above).
cudaError_t swiglu_backward(void* da, void* db, const void* dy, const void* a, const void* b, int64_t rows, int ffn,
                            int64_t in_row_stride, int64_t grad_row_stride, DType dtype, cudaStream_t stream,
                            uint32_t* da_amax_bits = nullptr, uint32_t* db_amax_bits = nullptr);

}  // namespace dtrain::kernels
