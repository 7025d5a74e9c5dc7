// Casts to float8 with tensorwise dynamic scaling, in two passes over the
// input (its absolute maximum, then the scaled cast) instead of the six
// that libtorch's operations make (to fp32, abs, max, multiply, clamp, to
// fp8), for --precision fp8's products (models/fp8_linear.h).
//
// The result is the libtorch composition's, bit for bit:
//   amax  = max |x| (NaN if any element is NaN)
//   scale = fmax / max(amax, 1e-12)               (fp32 division)
//   y     = fp8(clamp(x * scale, -fmax, fmax))    (round to nearest even; NaN stays NaN)
// with fmax 448 for e4m3 and 57344 for e5m2. `inverse` receives 1 / scale
// (the dequantising factor the scaled product takes). Conventions as
// kernel_types.h: x fp32 or bf16, any n >= 1, 16-byte alignment for the
// vector path, deterministic, nothing read on the host (capturable).
#pragma once

#include "models/kernels/kernel_types.h"

namespace dtrain::kernels {

enum class Fp8Format : uint8_t { kE4M3, kE5M2 };

// Bytes of workspace fp8_cast needs for n elements (4 per block of the amax pass).
size_t fp8_cast_workspace_size(int64_t n);

// The same cast of a row-major [rows, cols] x into both y (row-major
// [rows, cols]) and yt = yᵀ (row-major [cols, rows]: the column-major copy
// an FP8 product on Hopper takes as its second operand) in one pass after
// the absolute maximum, instead of a cast and a transposing copy. rows and
// cols multiples of 16; x, y and yt 16-byte aligned; else
// cudaErrorInvalidValue. Workspace: fp8_cast_workspace_size(rows * cols).
// With amax_bits (device, one uint32: the bit pattern of max |x|, which
// non-negative float32s order as, a NaN above infinity: what a producer
// of x keeps with atomicMax), no absolute-maximum pass: the scale comes
// from it (a NaN as the canonical NaN) and x is read once; workspace may
// be null. The same bits as the two passes when amax_bits is right.
cudaError_t fp8_cast_transposed(void* y, void* yt, float* scale, float* inverse, const void* x, DType dtype,
                                int64_t rows, int64_t cols, Fp8Format format, void* workspace, cudaStream_t stream,
                                const uint32_t* amax_bits = nullptr);

cudaError_t fp8_cast(void* y, float* scale, float* inverse, const void* x, DType dtype, int64_t n, Fp8Format format,
                     void* workspace, cudaStream_t stream);

// Axiswise (rowwise) scaling, as torchao's float8 "rowwise" recipe casts:
// e4m3 throughout, each row of y = x's row r scaled by
//   s_r = pow2(448 / max(amax_r, 1e-12)),  amax_r = max_c |x[r][c]|
// and each row of yt (yᵀ's layout, [cols, rows]) = x's column c scaled by
// s_c from that column's maximum, where pow2(s) rounds s down to a power
// of two (its exponent kept, its mantissa cleared; a NaN or infinite s
// kept), so no product of a scale rounds. row_inverse [rows] and
// col_inverse [cols] receive 1 / s_r and 1 / s_c (the scaled product's
// per-row and per-column factors). Clamping and rounding as fp8_cast.
// Two passes over x (the maxima, then both casts); rows and cols multiples
// of 16; x, y and yt 16-byte aligned. Workspace:
// fp8_cast_axiswise_workspace_size(rows, cols) bytes.
size_t fp8_cast_axiswise_workspace_size(int64_t rows, int64_t cols);
cudaError_t fp8_cast_axiswise(void* y, void* yt, float* row_inverse, float* col_inverse, const void* x, DType dtype,
                              int64_t rows, int64_t cols, void* workspace, cudaStream_t stream);

}  // namespace dtrain::kernels
