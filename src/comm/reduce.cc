#include "comm/reduce.h"

#include <bit>
#include <cstdint>
#include <string>
#include <type_traits>

#include "comm/communicator.h"
#include "common/error.h"

namespace dtrain {

float halfBitsToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) {
    // Rebias 15 -> 127; the mantissa widens from 10 to 23 bits.
    return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  }
  if (mantissa == 0) return std::bit_cast<float>(sign);
  // Subnormal half: mantissa * 2^-24, a normal float. Shift the leading one
  // up to the implicit-bit position, lowering the exponent to match.
  int shift = std::countl_zero(mantissa) - 21;  // leading one to bit 10
  uint32_t normalized = (mantissa << shift) & 0x3ffu;
  uint32_t float_exponent = static_cast<uint32_t>(127 - 14 - shift);
  return std::bit_cast<float>(sign | (float_exponent << 23) | (normalized << 13));
}

uint16_t floatToHalfBits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {
    // NaN: keep the top payload bits and force the quiet bit so the payload
    // cannot truncate to zero (which would read as infinity).
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  // 65520 is halfway between the largest half (65504, odd mantissa) and
  // 2^16, so it and everything above rounds to infinity.
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) {
    // Normal half (>= 2^-14): rebias 127 -> 15 and drop 13 mantissa bits.
    uint32_t half = (magnitude - 0x38000000u) >> 13;
    const uint32_t dropped = magnitude & 0x1fffu;
    // A carry out of the mantissa correctly bumps the exponent.
    if (dropped > 0x1000u || (dropped == 0x1000u && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  // 2^-25 is halfway between zero and the smallest subnormal; ties go to
  // the even neighbour, zero.
  if (magnitude <= 0x33000000u) return sign;
  // Subnormal half: value / 2^-24, rounded. value = m * 2^(e - 150) with the
  // implicit bit in m, so the quotient is m >> (126 - e), e in [102, 112].
  const uint32_t exponent = magnitude >> 23;
  const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exponent;
  uint32_t half = mantissa >> shift;
  const uint32_t dropped = mantissa & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (dropped > halfway || (dropped == halfway && (half & 1u))) ++half;  // may become 2^-14
  return static_cast<uint16_t>(sign | half);
}

float bfloat16BitsToFloat(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint16_t floatToBfloat16Bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  // Adding 0x7fff (+1 when the kept lsb is odd) carries into the kept bits
  // exactly when the dropped half is above (or at, for odd) the midpoint.
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

namespace {

// How a dtype's stored bits become the type its arithmetic is done in.
// Half and bfloat16 compute in float: the float result of one +, *, / of two
// such values, rounded again to half/bfloat16, equals the correctly rounded
// result because float has at least 2p+2 bits for their p (11, 8) bits.
template <typename T>
struct NativeCodec {
  using Storage = T;
  static T load(T v) { return v; }
  static T store(T v) { return v; }
};
struct HalfCodec {
  using Storage = uint16_t;
  static float load(uint16_t v) { return halfBitsToFloat(v); }
  static uint16_t store(float v) { return floatToHalfBits(v); }
};
struct Bfloat16Codec {
  using Storage = uint16_t;
  static float load(uint16_t v) { return bfloat16BitsToFloat(v); }
  static uint16_t store(float v) { return floatToBfloat16Bits(v); }
};

// Integers wrap (two's complement) instead of overflowing into UB.
template <typename M>
M add(M a, M b) {
  if constexpr (std::is_integral_v<M>) {
    return static_cast<M>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  } else {
    return a + b;
  }
}
template <typename M>
M multiply(M a, M b) {
  if constexpr (std::is_integral_v<M>) {
    return static_cast<M>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  } else {
    return a * b;
  }
}
// NaN in either operand propagates (a != a only for NaN).
template <typename M>
M minimum(M a, M b) { return (a < b || a != a) ? a : b; }
template <typename M>
M maximum(M a, M b) { return (a > b || a != a) ? a : b; }

template <typename Codec, typename Fn>
void applyElementwise(void* out, const void* a, const void* b, size_t count, Fn fn) {
  using S = typename Codec::Storage;
  S* o = static_cast<S*>(out);
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  for (size_t i = 0; i < count; ++i) o[i] = Codec::store(fn(Codec::load(x[i]), Codec::load(y[i])));
}

template <typename Codec>
void reduceWith(void* out, const void* a, const void* b, size_t count, ReduceOp op) {
  using M = decltype(Codec::load(typename Codec::Storage{}));
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return applyElementwise<Codec>(out, a, b, count, add<M>);
    case ReduceOp::kProd: return applyElementwise<Codec>(out, a, b, count, multiply<M>);
    case ReduceOp::kMin: return applyElementwise<Codec>(out, a, b, count, minimum<M>);
    case ReduceOp::kMax: return applyElementwise<Codec>(out, a, b, count, maximum<M>);
  }
  throw ConfigError("unknown reduce op value " + std::to_string(static_cast<int>(op)));
}

template <typename Codec>
void divideWith(void* data, size_t count, int64_t divisor) {
  using S = typename Codec::Storage;
  using M = decltype(Codec::load(S{}));
  S* values = static_cast<S*>(data);
  for (size_t i = 0; i < count; ++i) {
    M value = Codec::load(values[i]);
    if constexpr (std::is_integral_v<M>) {
      values[i] = Codec::store(static_cast<M>(static_cast<int64_t>(value) / divisor));
    } else {
      values[i] = Codec::store(value / static_cast<M>(divisor));
    }
  }
}

}  // namespace

void reduceElements(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kFloat32: return reduceWith<NativeCodec<float>>(out, a, b, count, op);
    case DType::kFloat64: return reduceWith<NativeCodec<double>>(out, a, b, count, op);
    case DType::kFloat16: return reduceWith<HalfCodec>(out, a, b, count, op);
    case DType::kBFloat16: return reduceWith<Bfloat16Codec>(out, a, b, count, op);
    case DType::kInt32: return reduceWith<NativeCodec<int32_t>>(out, a, b, count, op);
    case DType::kInt64: return reduceWith<NativeCodec<int64_t>>(out, a, b, count, op);
    case DType::kUInt8: return reduceWith<NativeCodec<uint8_t>>(out, a, b, count, op);
  }
  throw ConfigError("unknown DType value " + std::to_string(static_cast<int>(dtype)));
}

void reduceInto(void* dst, const void* src, size_t count, DType dtype, ReduceOp op) {
  reduceElements(dst, dst, src, count, dtype, op);
}

void divideInPlace(void* dst, size_t count, DType dtype, int64_t divisor) {
  if (divisor == 0) throw ConfigError("divideInPlace: divisor is 0; expected a group size >= 1");
  switch (dtype) {
    case DType::kFloat32: return divideWith<NativeCodec<float>>(dst, count, divisor);
    case DType::kFloat64: return divideWith<NativeCodec<double>>(dst, count, divisor);
    case DType::kFloat16: return divideWith<HalfCodec>(dst, count, divisor);
    case DType::kBFloat16: return divideWith<Bfloat16Codec>(dst, count, divisor);
    case DType::kInt32: return divideWith<NativeCodec<int32_t>>(dst, count, divisor);
    case DType::kInt64: return divideWith<NativeCodec<int64_t>>(dst, count, divisor);
    case DType::kUInt8: return divideWith<NativeCodec<uint8_t>>(dst, count, divisor);
  }
  throw ConfigError("unknown DType value " + std::to_string(static_cast<int>(dtype)));
}

}  // namespace dtrain
