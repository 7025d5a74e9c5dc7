#include "comm/types.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "tests/comm/rank_threads.h"

namespace dtrain {
namespace {

using testing::contains;

constexpr DType kEveryDType[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                                DType::kInt32,   DType::kInt64,   DType::kUInt8};

TEST(DTypeTest, SizesMatchTheElementWidths) {
  EXPECT_EQ(dtypeSize(DType::kFloat32), 4u);
  EXPECT_EQ(dtypeSize(DType::kFloat64), 8u);
  EXPECT_EQ(dtypeSize(DType::kFloat16), 2u);
  EXPECT_EQ(dtypeSize(DType::kBFloat16), 2u);
  EXPECT_EQ(dtypeSize(DType::kInt32), 4u);
  EXPECT_EQ(dtypeSize(DType::kInt64), 8u);
  EXPECT_EQ(dtypeSize(DType::kUInt8), 1u);
}

TEST(DTypeTest, NamesAreNcclTestsSpellingsAndParseBack) {
  EXPECT_STREQ(dtypeName(DType::kFloat32), "float");
  EXPECT_STREQ(dtypeName(DType::kFloat64), "double");
  EXPECT_STREQ(dtypeName(DType::kFloat16), "half");
  EXPECT_STREQ(dtypeName(DType::kBFloat16), "bfloat16");
  EXPECT_STREQ(dtypeName(DType::kInt32), "int32");
  EXPECT_STREQ(dtypeName(DType::kInt64), "int64");
  EXPECT_STREQ(dtypeName(DType::kUInt8), "uint8");
  for (DType dtype : kEveryDType) EXPECT_EQ(parseDType(dtypeName(dtype)), dtype) << dtypeName(dtype);
}

TEST(DTypeTest, ParsesAliases) {
  for (const char* text : {"f32", "float32", "fp32", "FLOAT"}) EXPECT_EQ(parseDType(text), DType::kFloat32) << text;
  for (const char* text : {"f64", "float64"}) EXPECT_EQ(parseDType(text), DType::kFloat64) << text;
  for (const char* text : {"f16", "fp16", "float16"}) EXPECT_EQ(parseDType(text), DType::kFloat16) << text;
  EXPECT_EQ(parseDType("bf16"), DType::kBFloat16);
  for (const char* text : {"i32", "int"}) EXPECT_EQ(parseDType(text), DType::kInt32) << text;
  EXPECT_EQ(parseDType("i64"), DType::kInt64);
  EXPECT_EQ(parseDType("u8"), DType::kUInt8);
}

TEST(DTypeTest, UnknownNameIsConfigErrorListingValidNames) {
  try {
    parseDType("float8");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string message = e.message();
    EXPECT_TRUE(contains(message, "'float8'")) << message;
    for (DType dtype : kEveryDType) EXPECT_TRUE(contains(message, dtypeName(dtype))) << message;
    EXPECT_TRUE(contains(message, "bf16")) << message;
  }
}

TEST(ReduceOpTest, NamesParseBackAndUnknownIsConfigError) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProd}) {
    EXPECT_EQ(parseReduceOp(reduceOpName(op)), op) << reduceOpName(op);
  }
  EXPECT_STREQ(reduceOpName(ReduceOp::kProd), "prod");
  EXPECT_EQ(parseReduceOp("MAX"), ReduceOp::kMax);
  try {
    parseReduceOp("mean");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.message(), "'mean'")) << e.message();
    EXPECT_TRUE(contains(e.message(), "sum, avg, min, max, prod")) << e.message();
  }
}

TEST(BufferTest, BytesIsCountTimesElementSize) {
  Buffer buffer;
  buffer.count = 10;
  buffer.dtype = DType::kBFloat16;
  EXPECT_EQ(buffer.bytes(), 20u);
}

}  // namespace
}  // namespace dtrain
