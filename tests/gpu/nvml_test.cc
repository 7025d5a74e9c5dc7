// gpu/nvml.h in process, against the fake NVML (fake_nvml.cc). Xid
// events are tested through `dtrain exporter` (tests/exporter/
// exporter_cli_test.cc): the fake queues its Xid once per process.
#include "gpu/nvml.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <thread>

#include "common/error.h"
#include "common/settings.h"
#include "fake_nvml_library.h"
#include "fake_nvml_values.h"

namespace dtrain::gpu {
namespace {

namespace fake = dtrain::testing::fake_nvml;

std::string openError() {
  try {
    Nvml::open();
  } catch (const IoError& e) {
    return e.message();
  }
  return "(opened)";
}

class NvmlTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::useNvmlLibrary(DTRAIN_FAKE_NVML); }
  void TearDown() override {
    ::unsetenv("FAKE_NVML_INIT_ERROR");
    testing::useNvmlLibrary(DTRAIN_FAKE_NVML);
  }
};

TEST_F(NvmlTest, ReadsIdentityAndEveryReadingOfTheFakeGpus) {
  auto nvml = Nvml::open();
  ASSERT_EQ(nvml->gpus(), (std::vector<unsigned>{0, 1}));
  EXPECT_EQ(nvml->libraryName(), DTRAIN_FAKE_NVML);
  for (unsigned gpu : {0u, 1u}) {
    SCOPED_TRACE(gpu);
    EXPECT_EQ(nvml->uuid(gpu), fake::kUuid[gpu]);
    EXPECT_EQ(nvml->name(gpu), fake::kModel);
    EXPECT_EQ(nvml->pciBusId(gpu), fake::kPciBusId[gpu]);
    EXPECT_EQ(nvml->minorNumber(gpu), fake::kMinor[gpu]);
    auto util = nvml->utilization(gpu);
    ASSERT_TRUE(util);
    EXPECT_EQ(util->gpu, fake::kGpuUtil[gpu]);
    EXPECT_EQ(util->memory, fake::kMemUtil[gpu]);
    auto mem = nvml->memory(gpu);  // _v2: the fake's v1 fails, so this proves v2 was used
    ASSERT_TRUE(mem);
    EXPECT_EQ(mem->used_bytes, fake::kFbUsedMiB[gpu] << 20);
    EXPECT_EQ(mem->total_bytes, fake::kFbTotalMiB << 20);
    EXPECT_EQ(nvml->temperatureC(gpu), fake::kGpuTemp[gpu]);
    EXPECT_EQ(nvml->clockMhz(gpu, nvml_abi::NVML_CLOCK_SM), fake::kSmClock[gpu]);
    EXPECT_EQ(nvml->clockMhz(gpu, nvml_abi::NVML_CLOCK_MEM), fake::kMemClock);
    // The fake lacks ...ClocksEventReasons: the older symbol answers.
    EXPECT_EQ(nvml->clockEventReasons(gpu), fake::kClockReasons[gpu]);
    EXPECT_EQ(nvml->eccUncorrectedVolatile(gpu), fake::kEccDbeVolatile[gpu]);
    auto rows = nvml->remappedRows(gpu);
    ASSERT_TRUE(rows);
    EXPECT_EQ(rows->pending, fake::kRowRemapPending[gpu] != 0);
    EXPECT_FALSE(rows->failure);
  }
  EXPECT_EQ(nvml->powerUsageMilliwatts(0), fake::kPowerMilliwatts0);
}

TEST_F(NvmlTest, NotSupportedAndMissingFunctionsGiveNoReading) {
  auto nvml = Nvml::open();
  EXPECT_EQ(nvml->powerUsageMilliwatts(1), std::nullopt);  // NOT_SUPPORTED on GPU 1
  EXPECT_EQ(nvml->pcieReplayCounter(0), std::nullopt);     // the fake has no such symbol
  auto fields = nvml->fieldValues(1, {{nvml_abi::NVML_FI_DEV_MEMORY_TEMP, 0},
                                      {nvml_abi::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, nvml_abi::kNvmlScopeAllLinks},
                                      {nvml_abi::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 3}});
  ASSERT_EQ(fields.size(), 3u);
  EXPECT_EQ(fields[0], std::nullopt);  // memory temperature: NOT_SUPPORTED on GPU 1
  EXPECT_TRUE(fields[1].has_value());
  EXPECT_EQ(fields[2], std::nullopt);  // one link: not modelled
}

TEST_F(NvmlTest, GpmGivesTheMetricsBetweenTwoSamplesOnTheGpuThatHasIt) {
  auto nvml = Nvml::open();
  EXPECT_TRUE(nvml->gpmSupported(0));
  EXPECT_FALSE(nvml->gpmSupported(1));
  auto earlier = nvml->gpmAllocSample();
  auto later = nvml->gpmAllocSample();
  ASSERT_TRUE(earlier && later);
  ASSERT_TRUE(nvml->gpmTakeSample(0, *earlier));
  std::this_thread::sleep_for(std::chrono::milliseconds(fake::kGpmMinWindowMs + 20));
  ASSERT_TRUE(nvml->gpmTakeSample(0, *later));
  const unsigned kUnknownMetric = 250;
  auto values = nvml->gpmMetrics(0, *earlier, *later,
                                 {nvml_abi::NVML_GPM_METRIC_SM_UTIL, nvml_abi::NVML_GPM_METRIC_ANY_TENSOR_UTIL,
                                  nvml_abi::NVML_GPM_METRIC_PCIE_RX_PER_SEC,
                                  nvml_abi::NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, kUnknownMetric});
  EXPECT_EQ(values, (std::vector<std::optional<double>>{fake::kGpmSmUtil0, fake::kGpmAnyTensorUtil0,
                                                         fake::kGpmPcieRxMiBps0, fake::kGpmNvlinkTxMiBps0,
                                                         std::nullopt}));
  // The samples in the wrong order: NVML refuses, no value is made up.
  auto reversed = nvml->gpmMetrics(0, *later, *earlier, {nvml_abi::NVML_GPM_METRIC_SM_UTIL});
  EXPECT_EQ(reversed, (std::vector<std::optional<double>>{std::nullopt}));
  EXPECT_FALSE(nvml->gpmTakeSample(1, *later));  // no GPM on GPU 1
}

TEST_F(NvmlTest, AMissingLibraryNamesDlerror) {
  testing::useNvmlLibrary("/nonexistent/libnvidia-ml.so.1");
  std::string error = openError();
  EXPECT_TRUE(error.starts_with("NVML not available: ")) << error;
  EXPECT_NE(error.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos) << error;
}

TEST_F(NvmlTest, AFailingInitNamesTheCallTheCodeAndNvmlsString) {
  ::setenv("FAKE_NVML_INIT_ERROR", "9", 1);
  EXPECT_EQ(openError(), "NVML not available: nvmlInit_v2 failed: NVML error 9 (Driver Not Loaded)");
}

TEST_F(NvmlTest, ALibraryThatIsNotNvmlIsRefused) {
  testing::useNvmlLibrary("libm.so.6");
  std::string error = openError();
  EXPECT_NE(error.find("has no nvmlInit_v2"), std::string::npos) << error;
}

}  // namespace
}  // namespace dtrain::gpu
