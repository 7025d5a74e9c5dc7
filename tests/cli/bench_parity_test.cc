// `dtrain bench <collective>` as nccl-tests users run it: rows as they are
// measured. Real processes on loopback over the Gloo backend.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/support/background_process.h"
#include "tests/support/command.h"
#include "tests/support/ports.h"
#include "tests/support/temp_dir.h"

namespace dtrain::testing {
namespace {

std::string spawn(int n, const std::string& args) {
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
  BackgroundProcess job({"bash", "-c", spawn(2, "allreduce --backend gloo -b 8 -e 64M -f 2 -n 400 -w 0 -c 0")},
                        {}, dir / "log");
  const std::string first_row = "           8             2     float     sum      -1";
  ASSERT_TRUE(logShows(job, first_row, std::chrono::seconds(40))) << job.log();
  EXPECT_TRUE(job.running()) << "the first row must come while later sizes still run\n" << job.log();
  const std::string log = job.log();
  EXPECT_LT(log.find("#       size         count"), log.find(first_row)) << "the header comes first\n" << log;
  job.stop();
}

}  // namespace
}  // namespace dtrain::testing
