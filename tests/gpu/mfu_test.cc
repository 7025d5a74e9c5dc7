// gpu/mfu.h: the one MFU formula (items/s x FLOPs per item over GPUs x
// peak), and -1 for every input that makes it unknown.
#include "gpu/mfu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace dtrain::gpu {
namespace {

constexpr double kH100Bf16 = 989.4e12;

TEST(MfuTest, IsTheGroupsModelFlopsOverTheGroupsPeak) {
  // 1000 samples/s of 1 GFLOP each on 2 GPUs of 1 TFLOP/s: half the peak.
  EXPECT_DOUBLE_EQ(modelFlopsUtilisation(1000, 1e9, 2, 1e12), 0.5);
  // gpt2-124m at seq 1024 (6N + 12·L·d·T FLOPs per token, N its matmul
  // parameters; tests/models/lm_config_test.cc): 465,611 tokens/s on one
  // H100 is the 40.2% docs/benchmarks.md reports.
  const double flops_per_token = 6.0 * (124'439'808 - 1024 * 768) + 12.0 * 12 * 768 * 1024;
  EXPECT_NEAR(modelFlopsUtilisation(465611, flops_per_token, 1, kH100Bf16), 0.402, 0.0005);
}

TEST(MfuTest, AchievedFlopsPassAsARateWithOneFlopPerItem) {
  EXPECT_DOUBLE_EQ(modelFlopsUtilisation(0.4 * kH100Bf16, 1, 1, kH100Bf16), 0.4);
}

TEST(MfuTest, TheSameRateOnMoreGpusIsALowerShare) {
  const double one = modelFlopsUtilisation(2e3, 1e9, 1, 1e12);
  EXPECT_DOUBLE_EQ(modelFlopsUtilisation(2e3, 1e9, 4, 1e12), one / 4);
}

TEST(MfuTest, ARateOfZeroIsZero) { EXPECT_EQ(modelFlopsUtilisation(0, 1e9, 8, kH100Bf16), 0); }

TEST(MfuTest, IsUnknownWithoutAPeak) {
  EXPECT_EQ(modelFlopsUtilisation(1000, 1e9, 1, 0), -1);  // a GPU the table does not list, the CPU
  EXPECT_EQ(modelFlopsUtilisation(1000, 1e9, 1, -1e12), -1);
  EXPECT_EQ(modelFlopsUtilisation(1000, 1e9, 1, std::nan("")), -1);
}

TEST(MfuTest, IsUnknownWithoutGpusOrAFlopsCount) {
  EXPECT_EQ(modelFlopsUtilisation(1000, 1e9, 0, kH100Bf16), -1);
  EXPECT_EQ(modelFlopsUtilisation(1000, 1e9, -2, kH100Bf16), -1);
  EXPECT_EQ(modelFlopsUtilisation(1000, 0, 1, kH100Bf16), -1);  // a model that declares no FLOPs
  EXPECT_EQ(modelFlopsUtilisation(1000, std::nan(""), 1, kH100Bf16), -1);
}

TEST(MfuTest, IsUnknownForANegativeOrNonFiniteRate) {
  EXPECT_EQ(modelFlopsUtilisation(-1, 1e9, 1, kH100Bf16), -1);
  EXPECT_EQ(modelFlopsUtilisation(std::numeric_limits<double>::infinity(), 1e9, 1, kH100Bf16), -1);
  EXPECT_EQ(modelFlopsUtilisation(std::nan(""), 1e9, 1, kH100Bf16), -1);
}

}  // namespace
}  // namespace dtrain::gpu
