// `dtrain exporter --once` and `--list-metrics` as real processes, with the
// fake NVML (fake_nvml.cc) and without any NVML; the output checked by
// value, by label and by promtool.
#include <gtest/gtest.h>
#include <unistd.h>

#include <set>
#include <sstream>

#include "tests/support/command.h"
#include "exposition.h"
#include "fake_nvml_values.h"

namespace dtrain::testing {
namespace {

namespace fake = fake_nvml;

// The exporter with the fake NVML, no Slurm job and no NODE_NAME; stderr
// (the log) dropped unless `keep_log`.
std::string exporterCommand(const std::string& args, const std::string& env = "", bool keep_log = false) {
  return "env -u SLURM_JOB_ID -u NODE_NAME DTRAIN_NVML_LIBRARY=" DTRAIN_FAKE_NVML " " + env + " " + dtrainBin() +
         " exporter " + args + (keep_log ? "" : " 2>/dev/null");
}

std::string hostName() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

std::map<std::string, std::string> gpu(unsigned index) { return {{"gpu", std::to_string(index)}}; }

class ExporterOnceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    result_ = new CommandResult(runCommand(exporterCommand("--once")));
    samples_ = new std::vector<ParsedSample>(parseExposition(result_->output));
  }
  static void TearDownTestSuite() {
    delete result_;
    delete samples_;
  }
  void SetUp() override { ASSERT_EQ(result_->exit_code, 0) << result_->output; }

  static const std::string& text() { return result_->output; }
  static const std::vector<ParsedSample>& samples() { return *samples_; }
  static std::optional<double> value(const std::string& name, const std::map<std::string, std::string>& having) {
    return valueOf(*samples_, name, having);
  }

  static CommandResult* result_;
  static std::vector<ParsedSample>* samples_;
};
CommandResult* ExporterOnceTest::result_ = nullptr;
std::vector<ParsedSample>* ExporterOnceTest::samples_ = nullptr;

TEST_F(ExporterOnceTest, EveryGpuSeriesCarriesDcgmExportersLabels) {
  auto series = samplesOf(samples(), "DCGM_FI_DEV_GPU_UTIL");
  ASSERT_EQ(series.size(), 2u) << text();
  for (unsigned g = 0; g < fake::kGpus; ++g) {
    const auto& labels = series[g].labels;
    EXPECT_EQ(labels, (std::map<std::string, std::string>{{"gpu", std::to_string(g)},
                                                          {"UUID", fake::kUuid[g]},
                                                          {"pci_bus_id", fake::kPciBusId[g]},
                                                          {"device", "nvidia" + std::to_string(fake::kMinor[g])},
                                                          {"modelName", fake::kModel},
                                                          {"Hostname", hostName()}}));
  }
  for (const ParsedSample& s : samples()) {
    if (!s.name.starts_with("DCGM_") && !s.name.starts_with("dtrain_gpu_")) continue;
    for (const char* label : {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}) {
      EXPECT_EQ(s.labels.count(label), 1u) << s.name << " lacks " << label;
    }
    EXPECT_EQ(s.labels.count("slurm_job_id"), 0u) << s.name;
  }
}

TEST_F(ExporterOnceTest, ValuesAreTheFakesInDcgmUnits) {
  for (unsigned g = 0; g < fake::kGpus; ++g) {
    SCOPED_TRACE(g);
    EXPECT_EQ(value("DCGM_FI_DEV_GPU_UTIL", gpu(g)), fake::kGpuUtil[g]);
    EXPECT_EQ(value("DCGM_FI_DEV_MEM_COPY_UTIL", gpu(g)), fake::kMemUtil[g]);
    EXPECT_EQ(value("DCGM_FI_DEV_FB_USED", gpu(g)), static_cast<double>(fake::kFbUsedMiB[g]));
    EXPECT_EQ(value("DCGM_FI_DEV_FB_FREE", gpu(g)),
              static_cast<double>(fake::kFbTotalMiB - fake::kFbReservedMiB - fake::kFbUsedMiB[g]));
    EXPECT_EQ(value("DCGM_FI_DEV_FB_TOTAL", gpu(g)), static_cast<double>(fake::kFbTotalMiB));
    EXPECT_EQ(value("DCGM_FI_DEV_GPU_TEMP", gpu(g)), fake::kGpuTemp[g]);
    EXPECT_EQ(value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu(g)), static_cast<double>(fake::kEnergyStartMj[g]));
    EXPECT_EQ(value("DCGM_FI_DEV_SM_CLOCK", gpu(g)), fake::kSmClock[g]);
    EXPECT_EQ(value("DCGM_FI_DEV_MEM_CLOCK", gpu(g)), fake::kMemClock);
    EXPECT_EQ(value("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", gpu(g)), static_cast<double>(fake::kClockReasons[g]));
    EXPECT_EQ(value("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu(g)), static_cast<double>(fake::kEccDbeVolatile[g]));
    EXPECT_EQ(value("DCGM_FI_DEV_ROW_REMAP_PENDING", gpu(g)), fake::kRowRemapPending[g]);
    EXPECT_EQ(value("DCGM_FI_DEV_ROW_REMAP_FAILURE", gpu(g)), 0);
    EXPECT_EQ(value("dtrain_gpu_nvlink_tx_bytes_total", gpu(g)), fake::kNvlinkTxStartKiB * 1024.0);
    EXPECT_EQ(value("dtrain_gpu_nvlink_rx_bytes_total", gpu(g)), fake::kNvlinkRxStartKiB * 1024.0);
  }
  EXPECT_EQ(value("DCGM_FI_DEV_POWER_USAGE", gpu(0)), 612.345);
  EXPECT_EQ(value("DCGM_FI_DEV_MEMORY_TEMP", gpu(0)), fake::kMemoryTemp0);
  EXPECT_EQ(value("dtrain_exporter_nvml_available", {}), 1);
  EXPECT_EQ(value("dtrain_exporter_gpus", {}), 2);
}

TEST_F(ExporterOnceTest, UnsupportedFieldsAndMissingFunctionsAreLeftOutNotZero) {
  // NOT_SUPPORTED on GPU 1 only.
  EXPECT_EQ(samplesOf(samples(), "DCGM_FI_DEV_POWER_USAGE", gpu(1)).size(), 0u);
  EXPECT_EQ(samplesOf(samples(), "DCGM_FI_DEV_MEMORY_TEMP", gpu(1)).size(), 0u);
  // The fake has no nvmlDeviceGetPcieReplayCounter: no family at all.
  EXPECT_EQ(text().find("DCGM_FI_DEV_PCIE_REPLAY_COUNTER"), std::string::npos);
}

TEST_F(ExporterOnceTest, ClockEventReasonsAreDecodedOneGaugePerReason) {
  auto reasons = [&](unsigned g) {
    std::set<std::string> active;
    auto series = samplesOf(samples(), "dtrain_gpu_clock_event_active", gpu(g));
    EXPECT_EQ(series.size(), 9u);
    for (const auto& s : series) {
      if (s.value == 1) active.insert(s.labels.at("reason"));
    }
    return active;
  };
  EXPECT_EQ(reasons(0), (std::set<std::string>{"sw_power_cap"}));
  EXPECT_EQ(reasons(1), (std::set<std::string>{"gpu_idle", "hw_thermal_slowdown"}));
}

TEST_F(ExporterOnceTest, TheQueuedXidIsCountedAndReportedAsTheLast) {
  EXPECT_EQ(value("DCGM_FI_DEV_XID_ERRORS", gpu(0)), static_cast<double>(fake::kXid));
  EXPECT_EQ(value("DCGM_FI_DEV_XID_ERRORS", gpu(1)), 0);  // watched, none yet (as DCGM)
  EXPECT_EQ(value("dtrain_gpu_xid_events_total", {{"gpu", "0"}, {"xid", "79"}}), 1);
  EXPECT_EQ(samplesOf(samples(), "dtrain_gpu_xid_events_total", gpu(1)).size(), 0u);
}

TEST_F(ExporterOnceTest, CountersAndGaugesAreTypedAsDcgmExporterTypesThem) {
  for (const char* counter : {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                              "dtrain_gpu_xid_events_total", "dtrain_gpu_nvlink_tx_bytes_total",
                              "dtrain_gpu_nvlink_rx_bytes_total", "dtrain_exporter_collections_total"}) {
    EXPECT_EQ(typeOf(text(), counter), "counter") << counter;
  }
  for (const char* gauge : {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
                            "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
                            "dtrain_gpu_clock_event_active", "dtrain_exporter_nvml_available"}) {
    EXPECT_EQ(typeOf(text(), gauge), "gauge") << gauge;
  }
}

TEST(ExporterCliTest, SlurmJobAndNodeNameBecomeLabels) {
  auto r = runCommand(exporterCommand("--once", "SLURM_JOB_ID=4242 NODE_NAME=node-a"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto samples = parseExposition(r.output);
  auto gpu_series = samplesOf(samples, "DCGM_FI_DEV_GPU_TEMP");
  ASSERT_EQ(gpu_series.size(), 2u);
  for (const auto& s : gpu_series) {
    EXPECT_EQ(s.labels.at("slurm_job_id"), "4242");
    EXPECT_EQ(s.labels.at("Hostname"), "node-a");
  }
}

TEST(ExporterCliTest, ListMetricsPrintsEveryNameOnceAndCoversWhatOnceExports) {
  auto r = runCommand(exporterCommand("--list-metrics"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::set<std::string> listed;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) EXPECT_TRUE(listed.insert(line).second) << "twice: " << line;
  std::set<std::string> expected = {
      "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
      "DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_POWER_USAGE",
      "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK",
      "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
      "DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_XID_ERRORS",
      "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
      "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
      "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES",
      "dtrain_gpu_nvlink_tx_bytes_total", "dtrain_gpu_nvlink_rx_bytes_total", "dtrain_gpu_clock_event_active",
      "dtrain_gpu_xid_events_total", "dtrain_exporter_nvml_available", "dtrain_exporter_gpus",
      "dtrain_exporter_collections_total", "dtrain_exporter_collection_duration_seconds",
      "dtrain_exporter_last_collection_timestamp_seconds"};
  EXPECT_EQ(listed, expected);
  auto once = runCommand(exporterCommand("--once"));
  for (const ParsedSample& s : parseExposition(once.output)) EXPECT_EQ(listed.count(s.name), 1u) << s.name;
}

TEST(ExporterCliTest, WithoutNvmlItReportsWhyAndExportsNoGpuSeries) {
  auto r = runCommand(exporterCommand("--once", "DTRAIN_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1", true));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("GPU metrics unavailable: NVML not available: /nonexistent/libnvidia-ml.so.1"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("# HELP dtrain_exporter_nvml_available 1 when NVML is loaded and initialized, else 0 "
                          "(no GPU metrics). NVML not available: /nonexistent/libnvidia-ml.so.1"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("\ndtrain_exporter_nvml_available 0\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\ndtrain_exporter_gpus 0\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("DCGM_FI_"), std::string::npos) << r.output;
}

TEST(ExporterCliTest, ADriverThatFailsInitIsReportedWithNvmlsOwnWords) {
  auto r = runCommand(exporterCommand("--once", "FAKE_NVML_INIT_ERROR=9", true));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("GPU metrics unavailable: NVML not available: nvmlInit_v2 failed: NVML error 9 "
                          "(Driver Not Loaded)"),
            std::string::npos)
      << r.output;
}

TEST(ExporterCliTest, BadFlagsAreUsageErrors) {
  for (const char* args : {"--listen 9400", "--listen :99999", "--listen ::1:9400", "--interval 0", "--history 0",
                           "--interval nan", "--interval inf", "--slow-interval -1", "--history 99999999999"}) {
    auto r = runCommand(exporterCommand(args, "", true));
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
  }
}

// promtool's lint flags exactly what dcgm-exporter compatibility requires and
// nothing else: its camelCase label names (modelName, Hostname) on every GPU
// series, and its counter names without _total. The output must parse, and
// the exporter's own series must lint clean.
TEST(ExporterCliTest, PromtoolAcceptsTheExposition) {
  if (runCommand("command -v promtool").exit_code != 0) GTEST_SKIP() << "promtool not installed (scripts/setup.sh)";
  auto r = runCommand(exporterCommand("--once") + " | promtool check metrics");
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 3) << "promtool could not parse it:\n" << r.output;
  const std::string camel_case = "label names should be written in 'snake_case' not 'camelCase'";
  const std::set<std::string> dcgm_names = {
      "counter metrics should have \"_total\" suffix",
      "metric name should not include type 'counter'",  // DCGM_FI_DEV_PCIE_REPLAY_COUNTER
  };
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    size_t space = line.find(' ');
    std::string metric = line.substr(0, space);
    std::string problem = space == std::string::npos ? "" : line.substr(space + 1);
    bool gpu_series = metric.starts_with("DCGM_FI_") || metric.starts_with("dtrain_gpu_");
    bool expected = (gpu_series && problem == camel_case) ||
                    (metric.starts_with("DCGM_FI_") && dcgm_names.count(problem) == 1);
    EXPECT_TRUE(expected) << line;
  }
  auto bare = runCommand(exporterCommand("--once", "DTRAIN_NVML_LIBRARY=/nonexistent") + " | promtool check metrics");
  EXPECT_EQ(bare.exit_code, 0) << bare.output;
}

}  // namespace
}  // namespace dtrain::testing
