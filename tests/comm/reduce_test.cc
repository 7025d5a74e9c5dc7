#include "comm/reduce.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "comm/communicator.h"
#include "comm/dtype_values.h"
#include "common/error.h"

namespace dtrain {
namespace {

constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                                DType::kInt32,   DType::kInt64,   DType::kUInt8};

bool isHalfNan(uint16_t bits) { return (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0; }
bool isBfloat16Nan(uint16_t bits) { return (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu) != 0; }

// IEEE binary16 decoded from its definition, independently of the code under test.
double halfByDefinition(uint16_t bits) {
  const int sign = (bits & 0x8000u) ? -1 : 1;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0x1f) return mantissa ? std::nan("") : sign * std::numeric_limits<double>::infinity();
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

TEST(HalfTest, KnownValuesBothWays) {
  EXPECT_EQ(floatToHalfBits(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalfBits(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalfBits(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalfBits(65520.0f), 0x7c00);  // halfway to 2^16: ties to even = infinity
  EXPECT_EQ(floatToHalfBits(1e10f), 0x7c00);
  EXPECT_EQ(floatToHalfBits(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(floatToHalfBits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(floatToHalfBits(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and 2^-24: even
  EXPECT_EQ(floatToHalfBits(std::ldexp(3.0f, -25)), 0x0002);  // tie between 1 and 2 ulps: even
  EXPECT_EQ(floatToHalfBits(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);        // tie: even
  EXPECT_EQ(floatToHalfBits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);    // tie: even
  EXPECT_EQ(halfBitsToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(halfBitsToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(halfBitsToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::isinf(halfBitsToFloat(0x7c00)));
}

TEST(HalfTest, EveryBitPatternDecodesByDefinitionAndRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const float value = halfBitsToFloat(h);
    if (isHalfNan(h)) {
      EXPECT_TRUE(std::isnan(value)) << std::hex << bits;
      EXPECT_TRUE(isHalfNan(floatToHalfBits(value))) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(static_cast<double>(value), halfByDefinition(h)) << std::hex << bits;
    ASSERT_EQ(floatToHalfBits(value), h) << std::hex << bits;
  }
}

// For every pair of neighbouring positive halves: the exact midpoint rounds to
// the even one, and one float ulp either side rounds to the nearer one. This
// covers subnormals, the subnormal/normal boundary, exponent carries and the
// overflow to infinity.
TEST(HalfTest, RoundsToNearestTiesToEvenBetweenEveryNeighbourPair) {
  for (uint16_t low = 0; low < 0x7c00; ++low) {
    const uint16_t high = low + 1;
    // The neighbour above the largest half is 2^16, which half spells infinity.
    const float high_value = high == 0x7c00 ? 65536.0f : halfBitsToFloat(high);
    const float midpoint = (halfBitsToFloat(low) + high_value) / 2;  // exact in float
    const uint16_t even = (low & 1u) ? high : low;
    ASSERT_EQ(floatToHalfBits(midpoint), even) << std::hex << low;
    ASSERT_EQ(floatToHalfBits(std::nextafter(midpoint, 0.0f)), low) << std::hex << low;
    ASSERT_EQ(floatToHalfBits(std::nextafter(midpoint, INFINITY)), high) << std::hex << low;
    ASSERT_EQ(floatToHalfBits(-midpoint), even | 0x8000u) << std::hex << low;
  }
}

TEST(HalfTest, NanWithOnlyLowPayloadBitsStaysNan) {
  const float nan_low_payload = std::bit_cast<float>(0x7f800001u);
  ASSERT_TRUE(std::isnan(nan_low_payload));
  EXPECT_TRUE(isHalfNan(floatToHalfBits(nan_low_payload)));
  EXPECT_TRUE(isBfloat16Nan(floatToBfloat16Bits(nan_low_payload)));
}

TEST(Bfloat16Test, KnownValuesAndEveryBitPatternRoundTrips) {
  EXPECT_EQ(floatToBfloat16Bits(1.0f), 0x3f80);
  EXPECT_EQ(floatToBfloat16Bits(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie: even
  EXPECT_EQ(floatToBfloat16Bits(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie: even
  EXPECT_EQ(floatToBfloat16Bits(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_EQ(floatToBfloat16Bits(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto b = static_cast<uint16_t>(bits);
    const float value = bfloat16BitsToFloat(b);
    ASSERT_EQ(std::bit_cast<uint32_t>(value), bits << 16);
    if (isBfloat16Nan(b)) {
      EXPECT_TRUE(isBfloat16Nan(floatToBfloat16Bits(value))) << std::hex << bits;
    } else {
      ASSERT_EQ(floatToBfloat16Bits(value), b) << std::hex << bits;
    }
  }
}

TEST(Bfloat16Test, RoundsToNearestTiesToEvenBetweenEveryNeighbourPair) {
  for (uint16_t low = 0; low < 0x7f80; ++low) {
    const uint16_t high = low + 1;
    // The midpoint is the low neighbour's bits followed by a single 1 bit
    // (also above the largest finite bfloat16, whose upper neighbour is inf).
    const float midpoint = std::bit_cast<float>((static_cast<uint32_t>(low) << 16) | 0x8000u);
    const uint16_t even = (low & 1u) ? high : low;
    ASSERT_EQ(floatToBfloat16Bits(midpoint), even) << std::hex << low;
    ASSERT_EQ(floatToBfloat16Bits(std::nextafter(midpoint, 0.0f)), low) << std::hex << low;
    ASSERT_EQ(floatToBfloat16Bits(std::nextafter(midpoint, INFINITY)), high) << std::hex << low;
  }
}

std::vector<char> elementsOf(DType dtype, const std::vector<double>& values) {
  std::vector<char> bytes(values.size() * dtypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) storeElement(bytes.data(), i, dtype, values[i]);
  return bytes;
}

TEST(ReduceIntoTest, EveryOpOnEveryDtype) {
  const std::vector<double> a = {3, 0, 7, 2, 1};
  const std::vector<double> b = {4, 6, 1, 2, 9};
  struct Case {
    ReduceOp op;
    std::vector<double> expected;
  };
  const Case cases[] = {
      {ReduceOp::kSum, {7, 6, 8, 4, 10}}, {ReduceOp::kAvg, {7, 6, 8, 4, 10}},  // avg accumulates a sum
      {ReduceOp::kProd, {12, 0, 7, 4, 9}}, {ReduceOp::kMin, {3, 0, 1, 2, 1}},
      {ReduceOp::kMax, {4, 6, 7, 2, 9}}};
  for (DType dtype : kAllDTypes) {
    for (const Case& c : cases) {
      auto dst = elementsOf(dtype, a);
      const auto src = elementsOf(dtype, b);
      reduceInto(dst.data(), src.data(), a.size(), dtype, c.op);
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(loadElement(dst.data(), i, dtype), c.expected[i])
            << dtypeName(dtype) << " " << reduceOpName(c.op) << " element " << i;
      }
    }
  }
}

TEST(ReduceIntoTest, IntegersWrapInsteadOfOverflowing) {
  int32_t i32[] = {std::numeric_limits<int32_t>::max(), -5};
  const int32_t i32_add[] = {1, 7};
  reduceInto(i32, i32_add, 2, DType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(i32[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(i32[1], 2);
  int64_t i64[] = {std::numeric_limits<int64_t>::max()};
  const int64_t i64_mul[] = {2};
  reduceInto(i64, i64_mul, 1, DType::kInt64, ReduceOp::kProd);
  EXPECT_EQ(i64[0], -2);
  uint8_t u8[] = {250, 16};
  const uint8_t u8_other[] = {10, 16};
  reduceInto(u8, u8_other, 1, DType::kUInt8, ReduceOp::kSum);
  reduceInto(u8 + 1, u8_other + 1, 1, DType::kUInt8, ReduceOp::kProd);
  EXPECT_EQ(u8[0], 4);
  EXPECT_EQ(u8[1], 0);
}

TEST(ReduceIntoTest, HalfAndBfloat16SumsRoundOnceToNearestEven) {
  // 2049 and 2051 are not halves: they are ties that go to the even neighbour.
  auto half = elementsOf(DType::kFloat16, {2048, 2050});
  const auto ones = elementsOf(DType::kFloat16, {1, 1});
  reduceInto(half.data(), ones.data(), 2, DType::kFloat16, ReduceOp::kSum);
  EXPECT_EQ(loadElement(half.data(), 0, DType::kFloat16), 2048);
  EXPECT_EQ(loadElement(half.data(), 1, DType::kFloat16), 2052);
  auto bf16 = elementsOf(DType::kBFloat16, {256, 258});
  const auto bf_ones = elementsOf(DType::kBFloat16, {1, 1});
  reduceInto(bf16.data(), bf_ones.data(), 2, DType::kBFloat16, ReduceOp::kSum);
  EXPECT_EQ(loadElement(bf16.data(), 0, DType::kBFloat16), 256);
  EXPECT_EQ(loadElement(bf16.data(), 1, DType::kBFloat16), 260);
}

TEST(ReduceIntoTest, MinAndMaxPropagateNanFromEitherSide) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float dst[] = {nan, 1.0f, nan, 1.0f};
  const float src[] = {1.0f, nan, 1.0f, nan};
  reduceInto(dst, src, 2, DType::kFloat32, ReduceOp::kMin);
  reduceInto(dst + 2, src + 2, 2, DType::kFloat32, ReduceOp::kMax);
  for (float value : dst) EXPECT_TRUE(std::isnan(value));
}

TEST(ReduceElementsTest, OutputMayAliasEitherInput) {
  float a[] = {1, 2};
  float b[] = {10, 20};
  reduceElements(b, a, b, 2, DType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(b[0], 11);
  EXPECT_EQ(b[1], 22);
}

TEST(DivideInPlaceTest, IntegersTruncateAndFloatsRound) {
  int32_t i32[] = {7, -7};
  divideInPlace(i32, 2, DType::kInt32, 2);
  EXPECT_EQ(i32[0], 3);
  EXPECT_EQ(i32[1], -3);
  uint8_t u8[] = {255};
  divideInPlace(u8, 1, DType::kUInt8, 4);
  EXPECT_EQ(u8[0], 63);
  auto half = elementsOf(DType::kFloat16, {1});
  divideInPlace(half.data(), 1, DType::kFloat16, 3);
  EXPECT_EQ(loadElement(half.data(), 0, DType::kFloat16), 0.333251953125);  // 0x3555
  auto bf16 = elementsOf(DType::kBFloat16, {1});
  divideInPlace(bf16.data(), 1, DType::kBFloat16, 3);
  EXPECT_EQ(loadElement(bf16.data(), 0, DType::kBFloat16), bfloat16BitsToFloat(0x3eab));
  double f64[] = {1};
  divideInPlace(f64, 1, DType::kFloat64, 4);
  EXPECT_EQ(f64[0], 0.25);
  EXPECT_THROW(divideInPlace(f64, 1, DType::kFloat64, 0), ConfigError);
}

}  // namespace
}  // namespace dtrain
