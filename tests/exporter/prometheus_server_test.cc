// A real Prometheus server (Debian's prometheus package) scrapes a real
// `dtrain exporter` with the fake NVML on loopback; the test queries
// Prometheus' HTTP API for the GPU series, then stops both by PID.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "../cli/process_runner.h"
#include "background_process.h"
#include "fake_nvml_values.h"
#include "http_client.h"

namespace dtrain::testing {
namespace {

using nlohmann::json;
namespace fake = fake_nvml;

// data.result of an instant query, once it has at least `want` series.
json queryUntil(int prometheus_port, const std::string& promql, size_t want, int timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  json result = json::array();
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = httpGet(prometheus_port, "/api/v1/query?query=" + urlEncode(promql));
    if (r.status == 200) {
      json body = json::parse(r.body, nullptr, false);
      if (!body.is_discarded() && body["status"] == "success") {
        result = body["data"]["result"];
        if (result.size() >= want) return result;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return result;
}

TEST(PrometheusServerTest, ScrapesTheExporterAndStoresGpuSeriesWithDcgmLabels) {
  std::string prometheus = runCommand("command -v prometheus").output;
  if (prometheus.empty()) GTEST_SKIP() << "prometheus not installed (scripts/setup.sh)";
  prometheus.erase(prometheus.find_last_not_of("\n") + 1);
  std::string dir = makeTempDir("dtrain_prometheus_test");

  int exporter_port = freePort();
  BackgroundProcess exporter({dtrainBin(), "exporter", "--listen", "127.0.0.1:" + std::to_string(exporter_port),
                              "--interval", "0.2"},
                             {{"DTRAIN_NVML_LIBRARY", DTRAIN_FAKE_NVML}}, dir + "/exporter.log");
  ASSERT_TRUE(waitForHealthy(exporter_port, 20)) << exporter.log();

  {
    std::ofstream config(dir + "/prometheus.yml");
    config << "global:\n"
              "  scrape_interval: 1s\n"
              "  scrape_timeout: 1s\n"
              "  evaluation_interval: 1s\n"
              "scrape_configs:\n"
              "  - job_name: dtrain\n"
              "    static_configs:\n"
              "      - targets: ['127.0.0.1:"
           << exporter_port << "']\n";
  }
  int prometheus_port = freePort();
  BackgroundProcess server({prometheus, "--config.file=" + dir + "/prometheus.yml",
                            "--storage.tsdb.path=" + dir + "/data",
                            "--web.listen-address=127.0.0.1:" + std::to_string(prometheus_port)},
                           {}, dir + "/prometheus.log");

  json util = queryUntil(prometheus_port, "DCGM_FI_DEV_GPU_UTIL", 2, 90);
  ASSERT_EQ(util.size(), 2u) << util.dump() << "\n" << server.log();
  for (const json& series : util) {
    const json& labels = series["metric"];
    unsigned gpu = std::stoul(labels["gpu"].get<std::string>());
    ASSERT_LT(gpu, fake::kGpus);
    EXPECT_EQ(labels["UUID"], fake::kUuid[gpu]);
    EXPECT_EQ(labels["modelName"], fake::kModel);
    EXPECT_EQ(labels["pci_bus_id"], fake::kPciBusId[gpu]);
    EXPECT_EQ(labels["job"], "dtrain");
    EXPECT_EQ(labels["instance"], "127.0.0.1:" + std::to_string(exporter_port));
    EXPECT_FALSE(labels["Hostname"].get<std::string>().empty());
    double value = std::stod(series["value"][1].get<std::string>());
    EXPECT_GE(value, 0);
    EXPECT_LE(value, 100);
    EXPECT_EQ(value, fake::kGpuUtil[gpu]);
  }
  json xid = queryUntil(prometheus_port, "dtrain_gpu_xid_events_total", 1, 10);
  ASSERT_EQ(xid.size(), 1u) << xid.dump();
  EXPECT_EQ(xid[0]["metric"]["xid"], "79");
  EXPECT_EQ(xid[0]["value"][1], "1");
  json power = queryUntil(prometheus_port, "DCGM_FI_DEV_POWER_USAGE", 1, 10);
  ASSERT_EQ(power.size(), 1u) << power.dump();  // GPU 1 does not support it
  EXPECT_EQ(power[0]["metric"]["gpu"], "0");
  json up = queryUntil(prometheus_port, "up{job=\"dtrain\"}", 1, 10);
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0]["value"][1], "1");
  // The energy counter rises between scrapes, as a counter must.
  json rate = queryUntil(prometheus_port, "rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\"}[5s])", 1, 20);
  ASSERT_EQ(rate.size(), 1u) << rate.dump();
  EXPECT_GT(std::stod(rate[0]["value"][1].get<std::string>()), 0);

  EXPECT_EQ(server.stop(), 0) << server.log();
  EXPECT_EQ(exporter.stop(), 0) << exporter.log();
  if (!HasFailure()) std::filesystem::remove_all(dir);  // kept to look at when it failed
}

}  // namespace
}  // namespace dtrain::testing
