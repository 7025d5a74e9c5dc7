// exporter/gpu_collector.h against the fake NVML (tests/gpu/fake_nvml.cc):
// NVML's readings in dcgm-exporter's units.
#include "exporter/gpu_collector.h"
#include "exporter/gpu_monitor.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "common/error.h"
#include "fake_nvml_library.h"
#include "fake_nvml_values.h"
#include "gpu/nvml.h"

namespace dtrain::exporter {
namespace {

namespace fake = dtrain::testing::fake_nvml;
using gpu::Nvml;

class GpuCollectorTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::useNvmlLibrary(DTRAIN_FAKE_NVML); }
};

TEST_F(GpuCollectorTest, CollectorConvertsToDcgmUnitsAndLeavesUnsupportedFieldsEmpty) {
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

TEST(GpuMonitorTest, ANonPositiveIntervalIsRefusedNamingIt) {
  MonitorOptions options;
  options.interval = std::chrono::milliseconds(0);
  try {
    GpuMonitor monitor(options);
    FAIL() << "a 0 ms interval was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.message(), "exporter interval 0 ms: expected at least 1 ms");
  }
}

}  // namespace
}  // namespace dtrain::exporter
