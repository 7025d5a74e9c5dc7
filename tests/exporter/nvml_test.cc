// exporter/nvml.h and exporter/gpu_collector.h in process, against the fake
// NVML (fake_nvml.cc). Xid events are tested through `dtrain exporter`
// (exporter_cli_test.cc): the fake queues its Xid once per process.
#include "exporter/nvml.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "common/error.h"
#include "common/settings.h"
#include "exporter/gpu_collector.h"
#include "fake_nvml_values.h"

namespace dtrain::exporter {
namespace {

namespace fake = dtrain::testing::fake_nvml;

// DTRAIN_NVML_LIBRARY is a cached setting: set the variable, forget the cache.
void useNvmlLibrary(const std::string& path) {
  ::setenv("DTRAIN_NVML_LIBRARY", path.c_str(), 1);
  for (const SettingBase* setting : allSettings()) {
    if (setting->env() == "DTRAIN_NVML_LIBRARY") setting->reset();
  }
}

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
  void SetUp() override { useNvmlLibrary(DTRAIN_FAKE_NVML); }
  void TearDown() override {
    ::unsetenv("FAKE_NVML_INIT_ERROR");
    useNvmlLibrary(DTRAIN_FAKE_NVML);
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

TEST_F(NvmlTest, CollectorConvertsToDcgmUnitsAndLeavesUnsupportedFieldsEmpty) {
  auto nvml = Nvml::open();
  GpuCollector collector(*nvml, std::chrono::milliseconds(0));
  ASSERT_EQ(collector.gpus().size(), 2u);
  EXPECT_EQ(collector.gpus()[1].device, "nvidia" + std::to_string(fake::kMinor[1]));
  auto first = collector.collect();
  auto second = collector.collect();
  ASSERT_EQ(first.size(), 2u);
  const GpuSample& g0 = first[0];
  const GpuSample& g1 = first[1];
  EXPECT_EQ(g0.gpu_util, fake::kGpuUtil[0]);
  EXPECT_EQ(g0.fb_used_mib, static_cast<double>(fake::kFbUsedMiB[0]));
  EXPECT_EQ(g0.fb_free_mib, static_cast<double>(fake::kFbTotalMiB - fake::kFbReservedMiB - fake::kFbUsedMiB[0]));
  EXPECT_EQ(g0.fb_total_mib, static_cast<double>(fake::kFbTotalMiB));
  EXPECT_EQ(g0.power_w, fake::kPowerMilliwatts0 / 1000.0);
  EXPECT_EQ(g0.memory_temp_c, fake::kMemoryTemp0);
  EXPECT_EQ(g1.power_w, std::nullopt);
  EXPECT_EQ(g1.memory_temp_c, std::nullopt);
  EXPECT_EQ(g0.pcie_replays, std::nullopt);
  EXPECT_EQ(g1.row_remap_pending, 1);
  EXPECT_EQ(g1.ecc_dbe_volatile, 2);
  // Counters advance between collections; NVLink KiB become bytes.
  ASSERT_TRUE(g0.energy_mj && second[0].energy_mj);
  EXPECT_EQ(*second[0].energy_mj - *g0.energy_mj, static_cast<double>(fake::kEnergyStepMj));
  ASSERT_TRUE(g0.nvlink_tx_bytes && second[0].nvlink_tx_bytes);
  EXPECT_EQ(*second[0].nvlink_tx_bytes - *g0.nvlink_tx_bytes, fake::kNvlinkStepKiB * 1024.0);
  EXPECT_EQ(static_cast<uint64_t>(*g0.nvlink_rx_bytes) % 1024, 0u);
}

TEST_F(NvmlTest, AMissingLibraryNamesDlerror) {
  useNvmlLibrary("/nonexistent/libnvidia-ml.so.1");
  std::string error = openError();
  EXPECT_TRUE(error.starts_with("NVML not available: ")) << error;
  EXPECT_NE(error.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos) << error;
}

TEST_F(NvmlTest, AFailingInitNamesTheCallTheCodeAndNvmlsString) {
  ::setenv("FAKE_NVML_INIT_ERROR", "9", 1);
  EXPECT_EQ(openError(), "NVML not available: nvmlInit_v2 failed: NVML error 9 (Driver Not Loaded)");
}

TEST_F(NvmlTest, ALibraryThatIsNotNvmlIsRefused) {
  useNvmlLibrary("libm.so.6");
  std::string error = openError();
  EXPECT_NE(error.find("has no nvmlInit_v2"), std::string::npos) << error;
}

}  // namespace
}  // namespace dtrain::exporter
