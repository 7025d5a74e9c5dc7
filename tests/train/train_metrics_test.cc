// TrainMetrics: the Prometheus text a training rank serves and the job
// status file `dtrain exporter` lists.
#include "train/train_metrics.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/error.h"
#include "common/host.h"
#include "train/bucket_timer.h"
#include "tests/support/text.h"

#if DTRAIN_TRAIN_HTTP
#include <httplib.h>
#endif

namespace dtrain {
namespace {

namespace fs = std::filesystem;

using testing::contains;

// The straggler monitor's last window: this rank's ratio, labelled with
// its host; absent before the first window.
TEST(TrainMetricsTest, RendersTheRanksStepTimeRatioOfTheLastStragglerWindow) {
  TrainMetrics metrics(1, 3, "j", torch::kCPU);
  EXPECT_FALSE(contains(metrics.render(), "dtrain_rank_step_time_ratio"));
  StragglerReport report;
  report.ratio = {1.0, 1.5, 0.98};
  metrics.stragglerWindow(report);
  const std::string text = metrics.render();
  EXPECT_TRUE(contains(text, "# TYPE dtrain_rank_step_time_ratio gauge")) << text;
  EXPECT_TRUE(contains(text, "dtrain_rank_step_time_ratio{dtrain_job=\"j\",rank=\"1\",host=\"" + hostName() + "\"} 1.5"))
      << text;
}

TEST(TrainMetricsTest, RendersCountersGaugesAndACumulativeHistogram) {
  const std::string dir = ::testing::TempDir() + "train_metrics_jobs";
  fs::remove_all(dir);
  ::setenv("DTRAIN_JOBS_DIR", dir.c_str(), 1);
  std::string status_file;
  {
    TrainMetrics metrics(0, 2, "job \"x\"", torch::kCPU);
    for (int i = 0; i < 5; ++i) {
      metrics.dataWait(0.001);
      metrics.stepStarted(32);
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
    BackwardTimeline backward;
    backward.backward_end_ms = 10;
    backward.buckets.push_back({.ready_ms = 1, .start_ms = 2, .end_ms = 6, .bytes = 100});   // hidden
    backward.buckets.push_back({.ready_ms = 9, .start_ms = 9, .end_ms = 13, .bytes = 100});  // 1 of 4 ms hidden
    metrics.logInterval(1234.5, 0.75, &backward, 200, 5);
    const std::string text = metrics.render();
    EXPECT_TRUE(contains(text, "# TYPE dtrain_train_steps_total counter")) << text;
    EXPECT_TRUE(contains(text, "dtrain_train_steps_total{dtrain_job=\"job \\\"x\\\"\",rank=\"0\"} 5")) << text;
    EXPECT_TRUE(contains(text, "dtrain_train_samples_total{dtrain_job=\"job \\\"x\\\"\",rank=\"0\"} 160")) << text;
    // This rank's share of the job's 1234.5 samples/s (2 ranks).
    EXPECT_TRUE(contains(text, "dtrain_train_samples_per_second{dtrain_job=\"job \\\"x\\\"\",rank=\"0\"} 617.25")) << text;
    EXPECT_TRUE(contains(text, "dtrain_train_loss{dtrain_job=\"job \\\"x\\\"\",rank=\"0\"} 0.75")) << text;
    EXPECT_TRUE(contains(text, "dtrain_train_allreduce_bytes_total{dtrain_job=\"job \\\"x\\\"\",rank=\"0\"} 1000")) << text;
    // 8 ms of all-reduce per sampled backward, 5 steps; 5 of the 8 ms before backward ended.
    EXPECT_TRUE(contains(text, "dtrain_train_allreduce_seconds_total{dtrain_job=\"job \\\"x\\\"\",rank=\"0\"} 0.04")) << text;
    EXPECT_TRUE(contains(text, "dtrain_train_overlap_ratio{dtrain_job=\"job \\\"x\\\"\",rank=\"0\"} 0.625")) << text;
    EXPECT_TRUE(contains(text, "# TYPE dtrain_train_step_seconds histogram")) << text;
    // 4 intervals between 5 step starts, each 3 ms or more.
    EXPECT_TRUE(contains(text, "dtrain_train_step_seconds_bucket{dtrain_job=\"job \\\"x\\\"\",rank=\"0\",le=\"0.001\"} 0"))
        << text;
    EXPECT_TRUE(contains(text, "dtrain_train_step_seconds_bucket{dtrain_job=\"job \\\"x\\\"\",rank=\"0\",le=\"+Inf\"} 4"))
        << text;
    EXPECT_TRUE(contains(text, "dtrain_train_step_seconds_count{dtrain_job=\"job \\\"x\\\"\",rank=\"0\"} 4")) << text;

    status_file = dir + "/" + std::to_string(::geteuid()) + "/job__x_.json";
    std::ifstream in(status_file);
    ASSERT_TRUE(in) << "no status file " << status_file;
    const auto status = nlohmann::json::parse(in);
    EXPECT_EQ(status["job"], "job \"x\"");
    EXPECT_EQ(status["world_size"], 2);
    EXPECT_DOUBLE_EQ(status["samples_per_s"].get<double>(), 1234.5);
    EXPECT_GT(status["step_ms"].get<double>(), 2.9);
    EXPECT_EQ(status["pid"], ::getpid());
    EXPECT_GT(status["start_time"].get<unsigned long long>(), 0u) << "the process's start time, for the exporter";
    EXPECT_TRUE(status["pid_ns"].get<std::string>().starts_with("pid:[")) << status.dump();
  }
  EXPECT_FALSE(fs::exists(status_file)) << "the status file outlived the job";
  ::unsetenv("DTRAIN_JOBS_DIR");
}

TEST(TrainMetricsTest, OnlyRankZeroWritesTheStatusFile) {
  const std::string dir = ::testing::TempDir() + "train_metrics_jobs_rank1";
  fs::remove_all(dir);
  ::setenv("DTRAIN_JOBS_DIR", dir.c_str(), 1);
  TrainMetrics metrics(1, 2, "j", torch::kCPU);
  metrics.logInterval(1, 1, nullptr, 0, 1);
  EXPECT_FALSE(fs::exists(dir + "/" + std::to_string(::geteuid()) + "/j.json"));
  EXPECT_FALSE(contains(metrics.render(), "dtrain_train_overlap_ratio")) << "no sampled backward, no ratio";
  ::unsetenv("DTRAIN_JOBS_DIR");
}

#if DTRAIN_TRAIN_HTTP
TEST(TrainMetricsTest, ServesMetricsAndHealthOverHttp) {
  TrainMetrics metrics(0, 1, "served", torch::kCPU);
  metrics.stepStarted(8);
  const int port = metrics.serve(0);
  httplib::Client client("127.0.0.1", port);
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << "no answer on port " << port;
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(contains(res->body, "dtrain_train_samples_total{dtrain_job=\"served\",rank=\"0\"} 8")) << res->body;
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->body, "ok\n");
  EXPECT_EQ(client.Get("/nope")->status, 404);
  TrainMetrics other(0, 1, "other", torch::kCPU);
  EXPECT_THROW(other.serve(port), IoError) << "a taken port is an IoError";
}
#endif

}  // namespace
}  // namespace dtrain
