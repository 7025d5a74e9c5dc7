// `dtrain bench <collective>` as nccl-tests users run it: rows as they are
// measured, the job named on the first line, nccl-tests' -a/-z/-G/-g. Real
// processes on loopback over the Gloo backend (the GPU side: bench/gpu/
// bench_parity.sh).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <thread>

#include "tests/support/background_process.h"
#include "tests/support/command.h"
#include "tests/support/ports.h"
#include "tests/support/temp_dir.h"

namespace dtrain::testing {
namespace {

std::string spawnBench(int n, const std::string& args) {
  return "MASTER_PORT=" + std::to_string(freePort()) + " " + sourceDir() + "/scripts/spawn-local.sh " +
         std::to_string(n) + " -- " + dtrainBin() + " bench " + args;
}

// Polls the job's log until it holds `text` or `limit` passes.
bool logShows(BackgroundProcess& job, const std::string& text, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (job.log().find(text) != std::string::npos) return true;
    if (!job.running()) return job.log().find(text) != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(BenchParityTest, EachRowIsPrintedAsItsSizeFinishes) {
  TempDir dir("bench-rows");
  // 8 B .. 64 MiB with 400 iterations a size: the large sizes alone take
  // minutes over loopback Gloo, far longer than the test waits.
  BackgroundProcess job({"bash", "-c", spawnBench(2, "allreduce --backend gloo -b 8 -e 64M -f 2 -n 400 -w 0 -c 0")},
                        {}, dir / "log");
  const std::string first_row = "           8             2     float     sum      -1";
  ASSERT_TRUE(logShows(job, first_row, std::chrono::seconds(40))) << job.log();
  EXPECT_TRUE(job.running()) << "the first row must come while later sizes still run\n" << job.log();
  const std::string log = job.log();
  EXPECT_LT(log.find("#       size         count"), log.find(first_row)) << "the header comes first\n" << log;
  job.stop();
}

TEST(BenchParityTest, FirstLineNamesTheBackendAndDevices) {
  auto r = runCommand(spawnBench(2, "allreduce --backend gloo -b 8 -e 64 -n 1 -w 0 2>/dev/null"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.substr(0, r.output.find('\n')), "# dtrain bench allreduce: gloo on cpu (2 processes), 1 host")
      << r.output;
}

struct FlagRun {
  const char* flags;
  const char* header_line;
};

TEST(BenchParityTest, AverageAndBlockingRunOnGloo) {
  const FlagRun runs[] = {
      {"-a 0 -z 1", "# Blocking Enabled: wait and barrier after each iteration\n# Time across ranks: rank 0 (-a 0)"},
      {"--average 2 --blocking 2", "# Blocking Enabled: wait after each iteration, no barrier\n# Time across ranks: min (-a 2)"},
      {"-a 3 -z 3", "reported time excludes barrier\n# Time across ranks: max (-a 3)"},
      {"", "graph: 0\n# Time across ranks: average (-a 1)"},
  };
  for (const auto& run : runs) {
    auto r = runCommand(spawnBench(2, std::string("allreduce --backend gloo -b 64 -e 4K -f 8 -n 3 -w 1 -c 1 ") + run.flags));
    ASSERT_EQ(r.exit_code, 0) << run.flags << "\n" << r.output;
    EXPECT_NE(r.output.find(run.header_line), std::string::npos) << run.flags << "\n" << r.output;
    EXPECT_NE(r.output.find("# Out of bounds values : 0 OK"), std::string::npos) << run.flags << "\n" << r.output;
    EXPECT_NE(r.output.find("        4096          1024     float     sum      -1"), std::string::npos)
        << run.flags << "\n" << r.output;
  }
}

TEST(BenchParityTest, JsonNamesTheTimingFlags) {
  auto r = runCommand(spawnBench(2, "allreduce --backend gloo -b 1K -e 1K -n 2 -w 0 -a 2 -z 3 --json 2>/dev/null"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto doc = nlohmann::json::parse(r.output);
  EXPECT_EQ(doc["average"], 2);
  EXPECT_EQ(doc["blocking"], 3);
  EXPECT_EQ(doc["cuda_graph_launches"], 0);
  EXPECT_EQ(doc["gpus_per_process"], 1);
  EXPECT_EQ(doc["processes"], 2);
  EXPECT_EQ(doc["devices"], nlohmann::json::array({"cpu", "cpu"}));
}

struct BadFlag {
  const char* args;
  const char* expected;
};

TEST(BenchParityTest, CudaOnlyAndOutOfRangeFlagsExitTwoNamingTheFlag) {
  const BadFlag cases[] = {
      {"-g 2", "-g/--ngpus 2 needs CUDA (the nccl backend); gloo runs one CPU rank per process"},
      {"--ngpus 4", "-g/--ngpus 4 needs CUDA (the nccl backend)"},
      {"-G 10", "-G/--cudagraph 10 needs CUDA (the nccl backend); gloo runs on the CPU"},
      {"--cudagraph 3", "-G/--cudagraph 3 needs CUDA"},
      {"--cuda_graph 3", "-G/--cudagraph 3 needs CUDA"},
      {"-a 4", "'4': out of range; expected an integer from 0 to 3"},
      {"-z 4", "'4': out of range; expected an integer from 0 to 3"},
      {"-g 0", "'0': out of range; expected an integer from 1 to 64"},
      {"-z 1 -G 5", "-z/--blocking 1 cannot be combined with -G/--cudagraph 5; expected -z 0 with a CUDA graph"},
  };
  for (const auto& c : cases) {
    auto r = runCommand("RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(freePort()) + " " +
                            dtrainBin() + " bench allreduce --backend gloo " + c.args,
                        30);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace dtrain::testing
