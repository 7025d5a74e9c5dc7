// Host-side element arithmetic of the collective layer: IEEE half and
// bfloat16 conversions and the elementwise reductions behind reduceInto()
// (communicator.h), used by the Gloo backend and by every test's reference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/types.h"

namespace dtrain {

// Exact: every half and bfloat16 value is a float.
float halfBitsToFloat(uint16_t bits);
float bfloat16BitsToFloat(uint16_t bits);
// Round to nearest, ties to even; overflow gives infinity, NaN stays NaN
// (quiet), tiny values become subnormals or signed zero.
uint16_t floatToHalfBits(float value);
uint16_t floatToBfloat16Bits(float value);

// out[i] = a[i] (op) b[i] for `count` elements of `dtype`. `out` may alias
// `a` or `b`. kAvg accumulates like kSum: the caller divides once at the end
// (divideInPlace), which is how every backend computes an average.
// Integers wrap on overflow (two's complement), as NCCL's do.
void reduceElements(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op);

}  // namespace dtrain
