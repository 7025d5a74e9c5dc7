// Fused residual add + LayerNorm / RMSNorm, forward and backward.
//
// Forward, per row r of [rows, cols] (all arithmetic fp32):
//   h        = x + residual                 (residual may be null: h = x)
//   h is rounded to the activation dtype and stored in residual_out; the
//   norm reads that rounded value, so backward (which reads residual_out)
//   sees exactly what forward normalised.
//   LayerNorm: mean = sum(h)/cols, var = sum((h-mean)^2)/cols,
//              rstd = 1/sqrt(var + eps),  y = (h-mean)*rstd*weight + bias
//   RMSNorm:   rstd = 1/sqrt(sum(h^2)/cols + eps),  y = h*rstd*weight
//              (Llama's form: the weight multiplies after normalisation)
// Backward, given dy (the gradient of y) and dresidual (the gradient that
// reaches h along the residual stream, from the blocks above):
//   dx = dresidual + dnorm(dy)              = d(loss)/dh
//   dweight = sum over rows of dy*hhat,  dbias = sum over rows of dy
// where hhat = (h-mean)*rstd (LayerNorm) or h*rstd (RMSNorm). Since
// h = x + residual, dx is the gradient of both x and residual: the caller
// hands the same tensor to both.
//
// How the torch side calls them (one LayerNorm of a pre-norm block):
//   forward:  layer_norm_forward(...) with residual_out, mean, rstd set;
//             save residual_out (the new residual stream), weight, mean, rstd.
//   backward: ws = workspace of norm_backward_workspace_size(rows, cols)
//             bytes (fp32 partial sums; cache it, its size depends only on
//             the shape), then layer_norm_backward(...) with x =
//             residual_out, dresidual = the residual stream's incoming
//             gradient (or null for the first norm of the stream).
// The backward runs two kernels: a persistent one that writes dx and one
// fp32 partial sum of dweight/dbias per block into the workspace, and a
// small one that sums the partials column by column in a fixed order
// (deterministic, no atomics).
//
// Mixed precision (an fp32 residual stream under bf16 autocast, as PyTorch
// keeps it): with act_dtype fp32, forward's x (the update added to the
// stream) and y (the normed output, which feeds bf16 matmuls) may each be
// bf16 (bf16_x, bf16_y), and backward's dy may be bf16 (bf16_dy) and dx may
// also be written as bf16 (dx_bf16, for a bf16 update's gradient); the
// stream (residual, residual_out, dresidual, dx) and all arithmetic stay
// fp32. y in bf16 is the fp32 result rounded once, as a cast after the norm
// would give.
//
// y's absolute maximum (for an FP8 cast of y, models/fp8_linear.h's
// noteAbsoluteMaximum): with y_amax_bits, a device uint32 that the caller
// zeroes before the call, forward leaves there the bit pattern of max |v|
// over y's values v as stored (in y's dtype: bf16 under bf16_y): non-
// negative floats order as their bits, a NaN above infinity, so each
// warp's unsigned maximum goes in with one atomicMax (order-free, so
// deterministic). Without it (null, the default) the kernel is today's:
// the maximum is a separate instantiation, compiled out.
//
// Aliasing: every output may alias an input of the same shape (y == x,
// residual_out == residual, dx == dresidual or dy): each element is read and
// written by the same thread. dweight/dbias must not alias anything.
// Limits: cols <= 16384 (bf16) / 8192 (fp32) on the vector path, cols <=
// 4096 on the scalar path (unaligned pointers, cols not divisible by 8/4);
// larger rows are rejected with cudaErrorInvalidValue.
#pragma once

#include "models/kernels/kernel_types.h"

namespace dtrain::kernels {

struct NormForwardArgs {
  const void* x = nullptr;         // [rows, cols], activation dtype
  const void* residual = nullptr;  // [rows, cols] or null (no add)
  const void* weight = nullptr;    // [cols], parameter dtype
  const void* bias = nullptr;      // [cols] or null; LayerNorm only (must be null for RMSNorm)
  void* y = nullptr;               // [rows, cols], activation dtype
  void* residual_out = nullptr;    // [rows, cols] = x + residual (x when residual is null), or null
  float* mean = nullptr;           // [rows] or null; LayerNorm only
  float* rstd = nullptr;           // [rows] or null
  int64_t rows = 0;
  int cols = 0;
  float eps = 1e-5f;
  DType act_dtype = DType::kBFloat16;
  DType param_dtype = DType::kBFloat16;
  bool bf16_x = false;  // x is bf16 while act_dtype is fp32
  bool bf16_y = false;  // y is bf16 while act_dtype is fp32
  uint32_t* y_amax_bits = nullptr;  // one zeroed device uint32: max |y| as stored (above), or null
};

struct NormBackwardArgs {
  const void* dy = nullptr;         // [rows, cols], activation dtype
  const void* x = nullptr;          // [rows, cols]: what forward normalised (its residual_out, or its x)
  const void* weight = nullptr;     // [cols], parameter dtype
  const float* mean = nullptr;      // [rows] from forward; LayerNorm only
  const float* rstd = nullptr;      // [rows] from forward
  const void* dresidual = nullptr;  // [rows, cols] or null: added to dx
  void* dx = nullptr;               // [rows, cols], activation dtype
  void* dweight = nullptr;          // [cols], parameter dtype, or null (no parameter gradients)
  void* dbias = nullptr;            // [cols] or null; LayerNorm only
  bool accumulate = false;          // dweight/dbias += instead of =
  void* workspace = nullptr;  // norm_backward_workspace_size(rows, cols) bytes (unused when dweight and dbias are null)
  size_t workspace_bytes = 0;
  int64_t rows = 0;
  int cols = 0;
  DType act_dtype = DType::kBFloat16;
  DType param_dtype = DType::kBFloat16;
  bool bf16_dy = false;     // dy is bf16 while act_dtype is fp32
  void* dx_bf16 = nullptr;  // [rows, cols] or null: dx again, rounded to bf16 (act_dtype fp32 only)
};

cudaError_t layer_norm_forward(const NormForwardArgs& args, cudaStream_t stream);
cudaError_t layer_norm_backward(const NormBackwardArgs& args, cudaStream_t stream);
cudaError_t rms_norm_forward(const NormForwardArgs& args, cudaStream_t stream);
cudaError_t rms_norm_backward(const NormBackwardArgs& args, cudaStream_t stream);

// Bytes of workspace the backward of either norm needs for this shape.
size_t norm_backward_workspace_size(int64_t rows, int cols);

}  // namespace dtrain::kernels
