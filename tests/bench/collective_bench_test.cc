// The parts of the collective benchmark that need no ranks: how the ranks'
// times make one (nccl-tests' -a) and the first line of the table.
#include <gtest/gtest.h>

#include "bench/collective_bench.h"
#include "bench/collective_report.h"

namespace dtrain::bench {
namespace {

TEST(CollectiveBenchTest, RankTimesCombineAsNcclTestsAverageFlag) {
  const std::vector<double> times{30.0, 10.0, 50.0, 30.0};
  EXPECT_DOUBLE_EQ(combineRankTimes(times, RankTime::kRank0), 30.0);
  EXPECT_DOUBLE_EQ(combineRankTimes(times, RankTime::kAverage), 30.0);
  EXPECT_DOUBLE_EQ(combineRankTimes(times, RankTime::kMin), 10.0);
  EXPECT_DOUBLE_EQ(combineRankTimes(times, RankTime::kMax), 50.0);
  EXPECT_DOUBLE_EQ(combineRankTimes({7.0, 9.0}, RankTime::kAverage), 8.0);
  EXPECT_DOUBLE_EQ(combineRankTimes({7.0, 9.0}, RankTime::kRank0), 7.0);
  EXPECT_DOUBLE_EQ(combineRankTimes({}, RankTime::kMax), 0.0);
}

TEST(CollectiveBenchTest, TitleCountsGpusByNameProcessesAndHosts) {
  CollectiveBenchOptions options;
  BenchJob job;
  job.backend = "nccl";
  job.processes = 4;
  job.gpus_per_process = 2;
  job.devices.assign(8, "NVIDIA H100 80GB HBM3");
  job.hosts = {"a", "a", "a", "a", "b", "b", "b", "b"};
  EXPECT_EQ(formatCollectiveTitle(options, job),
            "# dtrain bench allreduce: nccl on 8 x NVIDIA H100 80GB HBM3 (4 processes x 2 GPUs), 2 hosts\n");
  job.processes = 1;
  job.gpus_per_process = 2;
  job.devices = {"NVIDIA A100", "NVIDIA H100"};
  job.hosts = {"a", "a"};
  options.collective = Collective::kBroadcast;
  EXPECT_EQ(formatCollectiveTitle(options, job),
            "# dtrain bench broadcast: nccl on 1 x NVIDIA A100, 1 x NVIDIA H100 (1 process x 2 GPUs), 1 host\n");
  job.backend = "gloo";
  job.processes = 3;
  job.gpus_per_process = 1;
  job.devices.assign(3, "cpu");
  job.hosts.assign(3, "a");
  EXPECT_EQ(formatCollectiveTitle(options, job), "# dtrain bench broadcast: gloo on cpu (3 processes), 1 host\n");
}

}  // namespace
}  // namespace dtrain::bench
