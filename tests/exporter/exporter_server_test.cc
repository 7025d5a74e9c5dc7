// `dtrain exporter` serving over HTTP, as a real process on loopback with the
// fake NVML: the endpoints, the live page's JSON, concurrency, and requests
// a well-behaved client would not send.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/command.h"
#include "tests/support/ports.h"
#include "tests/support/background_process.h"
#include "tests/support/temp_dir.h"
#include "exposition.h"
#include "fake_nvml_values.h"
#include "http_client.h"

namespace dtrain::testing {
namespace {

using nlohmann::json;
namespace fake = fake_nvml;

class ExporterServerTest : public ::testing::Test {
 protected:
  void start(const std::string& nvml_library = DTRAIN_FAKE_NVML, const std::string& interval = "0.1",
             std::map<std::string, std::string> env = {}) {
    port_ = freePort();
    dir_ = makeTempDir("dtrain_exporter_test");
    env["DTRAIN_NVML_LIBRARY"] = nvml_library;
    exporter_ = std::make_unique<BackgroundProcess>(
        std::vector<std::string>{dtrainBin(), "exporter", "--listen", "127.0.0.1:" + std::to_string(port_),
                                 "--interval", interval, "--slow-interval", "0"},
        env, dir_ + "/exporter.log");
    ASSERT_TRUE(waitForHealthy(port_, 20)) << exporter_->log();
  }
  void TearDown() override {
    if (exporter_) {
      EXPECT_EQ(exporter_->stop(), 0) << exporter_->log();
    }
    if (!dir_.empty() && !HasFailure()) std::filesystem::remove_all(dir_);  // kept when it failed
  }

  int port_ = 0;
  std::string dir_;
  std::unique_ptr<BackgroundProcess> exporter_;
};

TEST_F(ExporterServerTest, ServesMetricsHealthAndTheLivePage) {
  start();
  auto metrics = httpGet(port_, "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.header("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  auto samples = parseExposition(metrics.body);
  EXPECT_EQ(valueOf(samples, "DCGM_FI_DEV_GPU_UTIL", {{"gpu", "0"}, {"UUID", fake::kUuid[0]}}), fake::kGpuUtil[0]);
  EXPECT_EQ(valueOf(samples, "dtrain_gpu_xid_events_total", {{"gpu", "0"}, {"xid", "79"}}), 1);
  auto health = httpGet(port_, "/healthz");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, "ok");
  auto page = httpGet(port_, "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.header("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("<html"), std::string::npos);
  auto head = httpRequest(port_, "HEAD", "/metrics");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
}

TEST_F(ExporterServerTest, CountersAdvanceBetweenCollections) {
  start();
  auto energy = [&] {
    return valueOf(parseExposition(httpGet(port_, "/metrics").body), "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                   {{"gpu", "0"}});
  };
  auto first = energy();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto later = energy();
  ASSERT_TRUE(first && later);
  EXPECT_GT(*later, *first);
}

TEST_F(ExporterServerTest, ApiGpusHasTheLatestReadingPerGpu) {
  start();
  auto r = httpGet(port_, "/api/gpus");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("Content-Type"), "application/json");
  json gpus = json::parse(r.body);
  ASSERT_TRUE(gpus.is_array());
  ASSERT_EQ(gpus.size(), 2u);
  for (unsigned g = 0; g < fake::kGpus; ++g) {
    const json& o = gpus[g];
    EXPECT_EQ(o["gpu"], g);
    EXPECT_EQ(o["uuid"], fake::kUuid[g]);
    EXPECT_EQ(o["name"], fake::kModel);
    EXPECT_EQ(o["pci_bus_id"], fake::kPciBusId[g]);
    EXPECT_EQ(o["util"], fake::kGpuUtil[g]);
    EXPECT_EQ(o["mem_used_mib"], fake::kFbUsedMiB[g]);
    EXPECT_EQ(o["mem_total_mib"], fake::kFbTotalMiB);
    EXPECT_EQ(o["temp_c"], fake::kGpuTemp[g]);
    EXPECT_EQ(o["sm_clock_mhz"], fake::kSmClock[g]);
    EXPECT_GT(o["t"].get<double>(), 1.7e9);  // Unix seconds
  }
  EXPECT_EQ(gpus[0]["power_w"], 612.345);
  EXPECT_TRUE(gpus[1]["power_w"].is_null());  // NOT_SUPPORTED: null, never 0
  EXPECT_TRUE(gpus[1]["mem_temp_c"].is_null());
  EXPECT_TRUE(gpus[0]["pcie_replays"].is_null());
  EXPECT_EQ(gpus[0]["clock_events"], json::array({"sw_power_cap"}));
  EXPECT_EQ(gpus[0]["last_xid"], fake::kXid);
  EXPECT_EQ(gpus[0]["xid_events"], json({{"79", 1}}));
  EXPECT_EQ(gpus[1]["xid_events"], json::object());
}

TEST_F(ExporterServerTest, ApiHistoryKeepsSamplesOldestFirstAndFiltersBySince) {
  start();
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  auto r = httpGet(port_, "/api/history");
  ASSERT_EQ(r.status, 200);
  json history = json::parse(r.body);
  EXPECT_EQ(history["interval_s"], 0.1);
  EXPECT_EQ(history["history_s"], 600);
  EXPECT_EQ(history["capacity"], 6000);
  const json& samples = history["samples"];
  ASSERT_GE(samples.size(), 4u) << r.body.substr(0, 500);
  for (size_t i = 1; i < samples.size(); ++i) EXPECT_LT(samples[i - 1]["t"], samples[i]["t"]);
  EXPECT_EQ(samples.back()["gpus"].size(), 2u);
  EXPECT_EQ(samples.back()["gpus"][0]["uuid"], fake::kUuid[0]);
  double since = samples[samples.size() - 2]["t"].get<double>();
  json newer = json::parse(httpGet(port_, "/api/history?since=" + std::to_string(since)).body)["samples"];
  ASSERT_GE(newer.size(), 1u);
  EXPECT_GT(newer[0]["t"].get<double>(), since);
  EXPECT_EQ(httpGet(port_, "/api/history?since=yesterday").status, 400);
}

TEST_F(ExporterServerTest, HistoryIsARingBufferOfTheConfiguredLength) {
  port_ = freePort();
  dir_ = makeTempDir("dtrain_exporter_test");
  exporter_ = std::make_unique<BackgroundProcess>(
      std::vector<std::string>{dtrainBin(), "exporter", "--listen", "127.0.0.1:" + std::to_string(port_),
                               "--interval", "0.05", "--history", "1"},
      std::map<std::string, std::string>{{"DTRAIN_NVML_LIBRARY", DTRAIN_FAKE_NVML}}, dir_ + "/exporter.log");
  ASSERT_TRUE(waitForHealthy(port_, 20)) << exporter_->log();
  // 1 s of readings every 0.05 s: 20 kept, however long it runs.
  json history;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    history = json::parse(httpGet(port_, "/api/history").body);
  } while (history["samples"].size() < 20u && std::chrono::steady_clock::now() < deadline);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  history = json::parse(httpGet(port_, "/api/history").body);
  EXPECT_EQ(history["capacity"], 20);
  EXPECT_EQ(history["samples"].size(), 20u);
}

TEST_F(ExporterServerTest, ApiStatusSaysWhetherNvmlIsThere) {
  start();
  json status = json::parse(httpGet(port_, "/api/status").body);
  EXPECT_EQ(status["nvml_available"], true);
  EXPECT_TRUE(status["nvml_error"].is_null());
  EXPECT_EQ(status["gpu_count"], 2);
  EXPECT_EQ(status["interval_s"], 0.1);
}

TEST_F(ExporterServerTest, ApiJobsListsTheTrainingJobsStatusFiles) {
  std::string jobs = makeTempDir("dtrain_jobs");
  start(DTRAIN_FAKE_NVML, "0.1", {{"DTRAIN_JOBS_DIR", jobs}});
  EXPECT_EQ(httpGet(port_, "/api/jobs").body, "[]");
  // This user's folder; files without a process identity are listed as they are.
  const std::string mine = jobs + "/" + std::to_string(::geteuid());
  std::filesystem::create_directory(mine);
  std::ofstream(mine + "/resnet.json") << R"({"job":"resnet","world_size":8,"samples_per_s":9000.5,"step_ms":113.8,)"
                                       << R"("loss":1.25,"steps":40,"t":1700000000.5,"pid":4242,"restarts":0})";
  std::ofstream(mine + "/mlp.json") << R"({"job":"mlp","rank":0,"samples_per_s":100,"step_ms":5,"t":1700000001})";
  std::ofstream(mine + "/half.json.tmp") << R"({"job":"half")";  // a write in progress
  std::ofstream(mine + "/broken.json") << "{not json";
  std::ofstream(jobs + "/loose.json") << R"({"job":"loose"})";  // in no user's folder
  auto r = httpGet(port_, "/api/jobs");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("Content-Type"), "application/json");
  json listed = json::parse(r.body);
  ASSERT_EQ(listed.size(), 2u) << r.body;
  EXPECT_EQ(listed[0]["job"], "mlp");
  EXPECT_EQ(listed[1]["job"], "resnet");
  EXPECT_EQ(listed[1]["rank"], 0);
  EXPECT_EQ(listed[1]["world_size"], 8);
  EXPECT_EQ(listed[1]["samples_per_s"], 9000.5);
  EXPECT_EQ(listed[1]["uid"], ::geteuid());
  std::filesystem::remove(mine + "/resnet.json");
  EXPECT_EQ(json::parse(httpGet(port_, "/api/jobs").body).size(), 1u);
  std::filesystem::remove_all(jobs);
  EXPECT_EQ(httpGet(port_, "/api/jobs").body, "[]");
}

TEST_F(ExporterServerTest, WithoutNvmlItStillServesAndSaysWhy) {
  start("/nonexistent/libnvidia-ml.so.1");
  auto metrics = httpGet(port_, "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("\ndtrain_exporter_nvml_available 0\n"), std::string::npos) << metrics.body;
  EXPECT_NE(metrics.body.find("NVML not available: /nonexistent/libnvidia-ml.so.1"), std::string::npos);
  EXPECT_EQ(httpGet(port_, "/api/gpus").body, "[]");
  json status = json::parse(httpGet(port_, "/api/status").body);
  EXPECT_EQ(status["nvml_available"], false);
  EXPECT_NE(status["nvml_error"].get<std::string>().find("/nonexistent"), std::string::npos);
  EXPECT_NE(exporter_->log().find("GPU metrics unavailable: NVML not available"), std::string::npos)
      << exporter_->log();
}

TEST_F(ExporterServerTest, UnknownPathsAre404AndOtherMethods405) {
  start();
  EXPECT_EQ(httpGet(port_, "/nope").status, 404);
  EXPECT_EQ(httpGet(port_, "/metrics/extra").status, 404);
  for (const char* method : {"POST", "PUT", "DELETE", "PATCH", "OPTIONS"}) {
    for (const char* path : {"/metrics", "/nope"}) {
      auto r = httpRequest(port_, method, path, "x=1");
      EXPECT_EQ(r.status, 405) << method << " " << path;
      EXPECT_EQ(r.header("Allow"), "GET, HEAD") << method << " " << path;
    }
  }
  EXPECT_EQ(httpGet(port_, "/healthz").body, "ok");
}

TEST_F(ExporterServerTest, HugeAndMalformedRequestsAreRefusedAndItKeepsServing) {
  start();
  std::string big_header = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(64 * 1024, 'a') +
                           "\r\nConnection: close\r\n\r\n";
  EXPECT_EQ(httpExchange(port_, big_header).status, 400);
  std::string long_uri = "GET /" + std::string(100 * 1024, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n";
  EXPECT_EQ(httpExchange(port_, long_uri).status, 414);
  std::string big_body = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n" +
                         std::string(200 * 1024, 'b');
  EXPECT_EQ(httpExchange(port_, big_body).status, 413);
  EXPECT_EQ(httpExchange(port_, "garbage\r\n\r\n").status, 400);
  EXPECT_EQ(httpGet(port_, "/healthz").body, "ok");
  EXPECT_TRUE(exporter_->running());
}

TEST_F(ExporterServerTest, TwoHundredConcurrentConnectionsAreAllAnswered) {
  start();
  constexpr int kConnections = 200;
  std::vector<int> fds;
  for (int i = 0; i < kConnections; ++i) {
    int fd = connectLoopback(port_, 10);
    ASSERT_GE(fd, 0) << i;
    fds.push_back(fd);
  }
  // All open at once, then all ask, then all read.
  for (int fd : fds) {
    EXPECT_TRUE(sendAll(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  }
  int answered = 0;
  for (int fd : fds) {
    auto r = parseHttpResponse(readToEof(fd, 30));
    if (r.status == 200 && r.body.find("DCGM_FI_DEV_GPU_UTIL") != std::string::npos) {
      ++answered;
    } else {
      ADD_FAILURE() << "status " << r.status << ", " << r.body.size() << " bytes";
    }
    ::close(fd);
  }
  EXPECT_EQ(answered, kConnections);
  EXPECT_EQ(httpGet(port_, "/healthz").body, "ok");
}

TEST_F(ExporterServerTest, ConcurrentScrapesDuringCollectionGetWholeBodies) {
  start(DTRAIN_FAKE_NVML, "0.05");
  std::atomic<int> good{0}, total{0};
  std::vector<std::thread> scrapers;
  for (int t = 0; t < 8; ++t) {
    scrapers.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        auto r = httpGet(port_, "/metrics");
        ++total;
        auto samples = parseExposition(r.body);
        if (r.status == 200 && samplesOf(samples, "DCGM_FI_DEV_GPU_UTIL").size() == 2 &&
            samplesOf(samples, "dtrain_gpu_clock_event_active").size() == 18 && r.body.ends_with("\n")) {
          ++good;
        }
      }
    });
  }
  for (auto& t : scrapers) t.join();
  EXPECT_EQ(good.load(), total.load());
}

TEST_F(ExporterServerTest, StopsCleanlyOnSigterm) {
  start();
  auto began = std::chrono::steady_clock::now();
  EXPECT_EQ(exporter_->stop(), 0) << exporter_->log();
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(8));
  EXPECT_NE(exporter_->log().find("stopping on signal"), std::string::npos) << exporter_->log();
  exporter_.reset();
}

TEST(ExporterListenTest, AnAddressInUseIsAnErrorNamingIt) {
  int port = freePort();
  std::string dir = makeTempDir("dtrain_exporter_test");
  BackgroundProcess first({dtrainBin(), "exporter", "--listen", "127.0.0.1:" + std::to_string(port)},
                          {{"DTRAIN_NVML_LIBRARY", DTRAIN_FAKE_NVML}}, dir + "/first.log");
  ASSERT_TRUE(waitForHealthy(port, 20)) << first.log();
  auto second = runCommand("DTRAIN_NVML_LIBRARY=" DTRAIN_FAKE_NVML " " + dtrainBin() +
                           " exporter --listen 127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(second.exit_code, 1) << second.output;
  EXPECT_NE(second.output.find("cannot listen on 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << second.output;
  EXPECT_EQ(first.stop(), 0);
  if (!HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dtrain::testing
