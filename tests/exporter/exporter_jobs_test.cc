// `dtrain exporter`'s list of training jobs (GET /api/jobs) against real
// writer processes (job_status_writer.cc): a rank killed by SIGTERM or
// SIGKILL leaves its status file behind, and the exporter stops listing the
// job at once; jobs it may not read are logged once, at info level.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/background_process.h"
#include "tests/support/command.h"
#include "tests/support/ports.h"
#include "tests/support/temp_dir.h"
#include "http_client.h"

namespace dtrain::testing {
namespace {

using nlohmann::json;

json jobsOf(int port) {
  json jobs = json::parse(httpGet(port, "/api/jobs").body, nullptr, /*allow_exceptions=*/false);
  return jobs.is_array() ? jobs : json::array();
}

bool lists(int port, const std::string& job) {
  for (const auto& entry : jobsOf(port)) {
    if (entry.value("job", "") == job) return true;
  }
  return false;
}

size_t occurrences(const std::string& text, const std::string& part) {
  size_t count = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++count;
  return count;
}

TEST(ExporterJobsTest, AWorkerKilledBySigtermOrSigkillDisappears) {
  TempDir dir("dtrain-exporter-jobs");
  const std::map<std::string, std::string> env = {{"DTRAIN_JOBS_DIR", dir / "jobs"},
                                                  {"DTRAIN_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"}};
  const int port = freePort();
  BackgroundProcess exporter({dtrainBin(), "exporter", "--listen", "127.0.0.1:" + std::to_string(port)}, env,
                             dir / "exporter.log");
  ASSERT_TRUE(waitForHealthy(port, 20)) << exporter.log();
  for (int signal : {SIGTERM, SIGKILL}) {
    const std::string job = "worker-" + std::to_string(signal);
    BackgroundProcess worker({DTRAIN_JOB_STATUS_WRITER, job}, env, dir / (job + ".log"));
    for (int i = 0; i < 100 && !lists(port, job); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(lists(port, job)) << jobsOf(port).dump() << "\n" << worker.log();
    const std::string file = dir / ("jobs/" + std::to_string(::geteuid()) + "/" + job + ".json");
    ASSERT_TRUE(pathExists(file));
    ASSERT_EQ(::kill(worker.pid(), signal), 0);
    ASSERT_EQ(worker.waitForExit(std::chrono::seconds(10)), 128 + signal) << worker.log();
    EXPECT_FALSE(lists(port, job)) << "signal " << signal << ": " << jobsOf(port).dump();
    EXPECT_FALSE(pathExists(file)) << "the exporter (same user) removes the dead worker's file";
  }
  EXPECT_EQ(exporter.stop(), 0) << exporter.log();
}

TEST(ExporterJobsTest, JobsItMayNotReadAreLoggedOnceAtInfoLevel) {
  if (::geteuid() != 0) GTEST_SKIP() << "running the exporter as another user needs root";
  if (runCommand("command -v setpriv").exit_code != 0) GTEST_SKIP() << "no setpriv (util-linux)";
  TempDir dir("dtrain-exporter-jobs");
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  const std::map<std::string, std::string> env = {{"DTRAIN_JOBS_DIR", dir / "jobs"},
                                                  {"DTRAIN_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"}};
  // root's job, in a folder a umask of 077 left unreadable to others.
  BackgroundProcess worker({DTRAIN_JOB_STATUS_WRITER, "private"}, env, dir / "worker.log");
  const std::string root_dir = dir / "jobs/0";
  for (int i = 0; i < 100 && !pathExists(root_dir + "/private.json"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(pathExists(root_dir + "/private.json")) << worker.log();
  ASSERT_EQ(::chmod(root_dir.c_str(), 0700), 0);

  const int port = freePort();
  BackgroundProcess exporter({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", dtrainBin(), "exporter",
                              "--listen", "127.0.0.1:" + std::to_string(port)},
                             env, dir / "exporter.log");
  ASSERT_TRUE(waitForHealthy(port, 20)) << exporter.log();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(jobsOf(port).dump(), "[]");
  const std::string line = "cannot list " + root_dir + " (the jobs of uid 0): Permission denied";
  const std::string log = exporter.log();
  EXPECT_EQ(occurrences(log, line), 1u) << log;
  EXPECT_NE(log.find(" INFO "), std::string::npos) << log;
  EXPECT_EQ(exporter.stop(), 0) << exporter.log();
}

}  // namespace
}  // namespace dtrain::testing
