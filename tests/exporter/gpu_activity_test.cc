// GPU activity from NVML GPM (exporter/gpu_activity.h) against the fake
// NVML, whose GPU 0 has GPM and GPU 1 has not: in process through
// GpuCollector, and end to end through `dtrain exporter --once`.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "exporter/gpu_collector.h"
#include "exposition.h"
#include "fake_nvml_library.h"
#include "fake_nvml_values.h"
#include "gpu/nvml.h"
#include "tests/support/command.h"

namespace dtrain::testing {
namespace {

namespace fake = fake_nvml;
using exporter::GpuCollector;
using exporter::GpuSample;

constexpr double kMiB = 1024.0 * 1024.0;

const char* const kProfMetrics[] = {
    "DCGM_FI_PROF_SM_ACTIVE",     "DCGM_FI_PROF_SM_OCCUPANCY",  "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",   "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES"};

// The fake's GPM readings of GPU 0 in dcgm-exporter's units, by metric name.
std::map<std::string, double> expectedGpu0() {
  return {{"DCGM_FI_PROF_SM_ACTIVE", fake::kGpmSmUtil0 / 100.0},
          {"DCGM_FI_PROF_SM_OCCUPANCY", fake::kGpmSmOccupancy0 / 100.0},
          {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", fake::kGpmAnyTensorUtil0 / 100.0},
          {"DCGM_FI_PROF_DRAM_ACTIVE", fake::kGpmDramBwUtil0 / 100.0},
          {"DCGM_FI_PROF_PCIE_TX_BYTES", fake::kGpmPcieTxMiBps0 * kMiB},
          {"DCGM_FI_PROF_PCIE_RX_BYTES", fake::kGpmPcieRxMiBps0 * kMiB},
          {"DCGM_FI_PROF_NVLINK_TX_BYTES", fake::kGpmNvlinkTxMiBps0 * kMiB},
          {"DCGM_FI_PROF_NVLINK_RX_BYTES", fake::kGpmNvlinkRxMiBps0 * kMiB}};
}

std::vector<std::optional<double>> activityOf(const GpuSample& s) {
  return {s.sm_active,           s.sm_occupancy,        s.tensor_active,         s.dram_active,
          s.pcie_tx_bytes_per_s, s.pcie_rx_bytes_per_s, s.nvlink_tx_bytes_per_s, s.nvlink_rx_bytes_per_s};
}

class GpuActivityTest : public ::testing::Test {
 protected:
  void SetUp() override { useNvmlLibrary(DTRAIN_FAKE_NVML); }
};

TEST_F(GpuActivityTest, TheFirstCollectionHasDcgmRatiosAndBytesPerSecondWhereTheGpuHasGpm) {
  auto nvml = gpu::Nvml::open();
  GpuCollector collector(*nvml, std::chrono::milliseconds(0));
  auto samples = collector.collect();
  ASSERT_EQ(samples.size(), 2u);
  std::vector<std::optional<double>> expected;
  for (const char* name : kProfMetrics) expected.push_back(expectedGpu0().at(name));
  EXPECT_EQ(activityOf(samples[0]), expected);
  EXPECT_EQ(activityOf(samples[1]), std::vector<std::optional<double>>(8, std::nullopt));
  // Sooner than NVML's 100 ms window: the last values again, not a failure.
  auto again = collector.collect();
  EXPECT_EQ(activityOf(again[0]), expected);
  // After a window: a new pair of samples (the fake refuses a pair < 100 ms apart).
  std::this_thread::sleep_for(exporter::GpuActivitySampler::kMinWindow);
  EXPECT_EQ(activityOf(collector.collect()[0]), expected);
}

struct ExporterRun {
  CommandResult result;
  std::string log;
};

ExporterRun exporterOnce() {
  std::string log_path = ::testing::TempDir() + "/gpu_activity_exporter.log";
  ExporterRun run;
  run.result = runCommand("env -u SLURM_JOB_ID -u NODE_NAME DTRAIN_NVML_LIBRARY=" DTRAIN_FAKE_NVML " " + dtrainBin() +
                          " exporter --once 2>" + log_path);
  std::ifstream in(log_path);
  std::ostringstream text;
  text << in.rdbuf();
  run.log = text.str();
  return run;
}

TEST(ExporterActivityTest, OnceExportsDcgmProfMetricsForTheGpuWithGpmOnly) {
  ExporterRun run = exporterOnce();
  ASSERT_EQ(run.result.exit_code, 0) << run.result.output << run.log;
  auto samples = parseExposition(run.result.output);
  for (const auto& [name, value] : expectedGpu0()) {
    SCOPED_TRACE(name);
    auto series = samplesOf(samples, name);
    ASSERT_EQ(series.size(), 1u) << run.result.output;  // GPU 0 only
    EXPECT_EQ(series[0].labels.at("gpu"), "0");
    EXPECT_EQ(series[0].labels.at("UUID"), fake::kUuid[0]);
    EXPECT_EQ(series[0].labels.at("modelName"), fake::kModel);
    EXPECT_DOUBLE_EQ(series[0].value, value);
    EXPECT_EQ(typeOf(run.result.output, name), "gauge");
  }
}

TEST(ExporterActivityTest, AGpuWithoutGpmIsNamedOnceInTheLogAtInfoLevel) {
  ExporterRun run = exporterOnce();
  ASSERT_EQ(run.result.exit_code, 0) << run.log;
  const std::string line = "GPU 1: no GPU Performance Monitoring";
  size_t at = run.log.find(line);
  ASSERT_NE(at, std::string::npos) << run.log;
  EXPECT_EQ(run.log.find(line, at + 1), std::string::npos) << "said twice:\n" << run.log;
  EXPECT_EQ(run.log.find("GPU 0: no GPU Performance Monitoring"), std::string::npos) << run.log;
  size_t line_start = run.log.rfind('\n', at);
  std::string prefix = run.log.substr(line_start == std::string::npos ? 0 : line_start + 1,
                                      at - (line_start == std::string::npos ? 0 : line_start + 1));
  EXPECT_NE(prefix.find("INFO"), std::string::npos) << prefix;
}

}  // namespace
}  // namespace dtrain::testing
