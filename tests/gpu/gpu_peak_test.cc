// gpu/gpu_peak.h: the peak table matched on the names NVIDIA reports, the
// TF32 column for fp32 runs, unknown GPUs (0: MFU left out) and the
// DTRAIN_PEAK_TFLOPS override.
#include "gpu/gpu_peak.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "common/settings.h"

namespace dtrain::gpu {
namespace {

// DTRAIN_PEAK_TFLOPS is a cached setting: set (or clear) the variable, forget the cache.
void setPeakOverride(const char* tflops) {
  if (tflops == nullptr) {
    ::unsetenv("DTRAIN_PEAK_TFLOPS");
  } else {
    ::setenv("DTRAIN_PEAK_TFLOPS", tflops, 1);
  }
  for (const SettingBase* setting : allSettings()) {
    if (setting->env() == "DTRAIN_PEAK_TFLOPS") setting->reset();
  }
}

class GpuPeakTest : public ::testing::Test {
 protected:
  void SetUp() override { setPeakOverride(nullptr); }
  void TearDown() override { setPeakOverride(nullptr); }
};

TEST_F(GpuPeakTest, MatchesTheNamesNvidiaReports) {
  EXPECT_DOUBLE_EQ(peakDenseFlops("NVIDIA H100 80GB HBM3", "bf16"), 989.4e12);
  EXPECT_DOUBLE_EQ(peakDenseFlops("NVIDIA H100 80GB HBM3", "fp16"), 989.4e12);
  EXPECT_DOUBLE_EQ(peakDenseFlops("NVIDIA H200", "bf16"), 989.4e12);
  EXPECT_DOUBLE_EQ(peakDenseFlops("NVIDIA GH200 480GB", "bf16"), 989.4e12);
  EXPECT_DOUBLE_EQ(peakDenseFlops("NVIDIA B200", "bf16"), 2250e12);
  EXPECT_DOUBLE_EQ(peakDenseFlops("NVIDIA A100-SXM4-80GB", "bf16"), 312e12);
  EXPECT_DOUBLE_EQ(peakDenseFlops("NVIDIA L40S", "bf16"), 362.05e12);
}

TEST_F(GpuPeakTest, MoreSpecificH100NamesComeFirst) {
  EXPECT_DOUBLE_EQ(peakDenseFlops("NVIDIA H100 PCIe", "bf16"), 756e12);
  EXPECT_DOUBLE_EQ(peakDenseFlops("NVIDIA H100 NVL", "bf16"), 835e12);
}

TEST_F(GpuPeakTest, Fp32RunsUseTheTf32Column) {
  EXPECT_DOUBLE_EQ(peakDenseFlops("NVIDIA H100 80GB HBM3", "fp32"), 494.7e12);
  EXPECT_DOUBLE_EQ(peakDenseFlops("NVIDIA H100 PCIe", "fp32"), 378e12);
  EXPECT_DOUBLE_EQ(peakDenseFlops("NVIDIA A100-PCIE-40GB", "fp32"), 156e12);
}

TEST_F(GpuPeakTest, AGpuNotInTheTableHasNoPeak) {
  EXPECT_EQ(peakDenseFlops("NVIDIA GeForce RTX 4090", "bf16"), 0);
  EXPECT_EQ(peakDenseFlops("cpu", "fp32"), 0);
  EXPECT_EQ(peakDenseFlops("", "bf16"), 0);
}

TEST_F(GpuPeakTest, TheSettingOverridesTheTableForAnyGpu) {
  setPeakOverride("100");
  EXPECT_DOUBLE_EQ(peakDenseFlops("NVIDIA GeForce RTX 4090", "bf16"), 100e12);
  EXPECT_DOUBLE_EQ(peakDenseFlops("NVIDIA H100 80GB HBM3", "fp32"), 100e12);
  setPeakOverride("0");  // 0: the table again
  EXPECT_DOUBLE_EQ(peakDenseFlops("NVIDIA H100 80GB HBM3", "bf16"), 989.4e12);
}

}  // namespace
}  // namespace dtrain::gpu
