// A real Prometheus server (Debian's prometheus package) scrapes a real
// `dtrain exporter` with the fake NVML on loopback; the test queries
// Prometheus' HTTP API for the GPU series, then stops both by PID.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/command.h"
#include "tests/support/ports.h"
#include "tests/support/background_process.h"
#include "tests/support/temp_dir.h"
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
                              "--interval", "0.2", "--slow-interval", "0"},
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

// The same Prometheus scrapes a training rank (`dtrain train --metrics-port`)
// beside the exporter, which lists the job from its status file.
TEST(PrometheusServerTest, ScrapesATrainingRunAndTheExporterListsTheJob) {
  std::string prometheus = runCommand("command -v prometheus").output;
  if (prometheus.empty()) GTEST_SKIP() << "prometheus not installed (scripts/setup.sh)";
  prometheus.erase(prometheus.find_last_not_of("\n") + 1);
#if !DTRAIN_TEST_HAVE_TRAIN
  GTEST_SKIP() << "this build has no training runtime (libtorch)";
#endif
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "no Fashion-MNIST";
  std::string dir = makeTempDir("dtrain_prometheus_train_test");
  const std::map<std::string, std::string> env = {{"DTRAIN_JOBS_DIR", dir + "/jobs"},
                                                  {"DTRAIN_JOB_ID", "prom-train"},
                                                  {"DTRAIN_NVML_LIBRARY", DTRAIN_FAKE_NVML}};
  const int train_port = freePort();
  BackgroundProcess training({dtrainBin(), "train", "--model", "mlp", "--epochs", "50", "--log-every", "20",
                              "--eval-every", "0", "--progress", "none", "--metrics-port", std::to_string(train_port)},
                             env, dir + "/train.log");
  const int exporter_port = freePort();
  BackgroundProcess exporter({dtrainBin(), "exporter", "--listen", "127.0.0.1:" + std::to_string(exporter_port),
                              "--interval", "0.5"},
                             env, dir + "/exporter.log");
  ASSERT_TRUE(waitForHealthy(exporter_port, 20)) << exporter.log();
  {
    std::ofstream config(dir + "/prometheus.yml");
    config << "global:\n"
              "  scrape_interval: 1s\n"
              "  scrape_timeout: 1s\n"
              "scrape_configs:\n"
              "  - job_name: dtrain-train\n"
              "    static_configs:\n"
              "      - targets: ['127.0.0.1:"
           << train_port << "']\n";
  }
  const int prometheus_port = freePort();
  BackgroundProcess server({prometheus, "--config.file=" + dir + "/prometheus.yml",
                            "--storage.tsdb.path=" + dir + "/data",
                            "--web.listen-address=127.0.0.1:" + std::to_string(prometheus_port)},
                           {}, dir + "/prometheus.log");

  json steps = queryUntil(prometheus_port, "dtrain_train_steps_total > 20", 1, 90);
  ASSERT_EQ(steps.size(), 1u) << steps.dump() << "\n" << training.log() << server.log();
  // The training job's own label beside Prometheus' scrape job, neither
  // renamed (a rank's `job` label would have become exported_job).
  EXPECT_EQ(steps[0]["metric"]["dtrain_job"], "prom-train") << steps.dump();
  EXPECT_EQ(steps[0]["metric"]["job"], "dtrain-train") << steps.dump();
  EXPECT_FALSE(steps[0]["metric"].contains("exported_job")) << steps.dump();
  EXPECT_EQ(steps[0]["metric"]["rank"], "0");
  json rate = queryUntil(prometheus_port, "dtrain_train_samples_per_second > 0", 1, 30);
  ASSERT_EQ(rate.size(), 1u) << rate.dump();
  EXPECT_LT(std::stod(rate[0]["value"][1].get<std::string>()), 1e7);
  json p50 = queryUntil(prometheus_port, "histogram_quantile(0.5, rate(dtrain_train_step_seconds_bucket[5s])) > 0",
                        1, 30);
  ASSERT_EQ(p50.size(), 1u) << p50.dump();
  EXPECT_LT(std::stod(p50[0]["value"][1].get<std::string>()), 10.0) << "a step of an MLP takes far less";
  json loss = queryUntil(prometheus_port, "dtrain_train_loss > 0", 1, 10);
  ASSERT_EQ(loss.size(), 1u) << loss.dump();
  EXPECT_LT(std::stod(loss[0]["value"][1].get<std::string>()), 5.0);

  // The exporter's live-page API lists the running job from its status file.
  json jobs = json::array();
  for (int i = 0; i < 40 && jobs.empty(); ++i) {
    jobs = json::parse(httpGet(exporter_port, "/api/jobs").body, nullptr, false);
    if (jobs.is_discarded()) jobs = json::array();
    if (jobs.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ASSERT_EQ(jobs.size(), 1u) << jobs.dump();
  EXPECT_EQ(jobs[0]["job"], "prom-train");
  EXPECT_GT(jobs[0]["samples_per_s"].get<double>(), 0);

  training.stop();
  EXPECT_EQ(server.stop(), 0) << server.log();
  EXPECT_EQ(exporter.stop(), 0) << exporter.log();
  if (!HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dtrain::testing
