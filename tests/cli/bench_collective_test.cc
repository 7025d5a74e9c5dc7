// `dtrain bench <collective>` end to end: real processes on loopback, started
// by scripts/spawn-local.sh as a launcher would, over the Gloo backend.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/command.h"
#include "tests/support/ports.h"

namespace dtrain::testing {
namespace {

std::string spawn(int n, const std::string& args) {
  return "MASTER_PORT=" + std::to_string(freePort()) + " " + sourceDir() + "/scripts/spawn-local.sh " +
         std::to_string(n) + " -- " + dtrainBin() + " bench " + args;
}

TEST(BenchCollectiveTest, TwoRankAllreducePrintsNcclTestsTableWithNoErrors) {
  auto r = runCommand(spawn(2, "allreduce --backend gloo -b 8 -e 1M -f 4 -n 3 -w 1 -c 1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("#       size         count      type   redop    root     time   algbw   busbw #wrong"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("# Out of bounds values : 0 OK"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("# Avg bus bandwidth    :"), std::string::npos) << r.output;
  // 8 B .. 1 MiB by 4: 8, 32, 128, 512, 2K, 8K, 32K, 128K, 512K.
  EXPECT_NE(r.output.find("      524288        131072     float     sum      -1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("           8             2     float     sum      -1"), std::string::npos) << r.output;
}

TEST(BenchCollectiveTest, EveryCollectiveAndDtypeChecksClean) {
  for (const char* coll : {"allgather", "reduce_scatter", "broadcast", "sendrecv", "alltoall", "reduce", "gather",
                           "scatter"}) {
    auto r = runCommand(spawn(3, std::string(coll) + " --backend gloo -b 96 -e 96K -f 8 -n 2 -w 1 -d bfloat16 -r 1"));
    ASSERT_EQ(r.exit_code, 0) << coll << "\n" << r.output;
    EXPECT_NE(r.output.find("# Out of bounds values : 0 OK"), std::string::npos) << coll << "\n" << r.output;
  }
  for (const char* op : {"avg", "prod", "min", "max"}) {
    auto r = runCommand(spawn(2, std::string("allreduce --backend gloo -b 64 -e 4K -f 8 -n 2 -w 0 -d half -o ") + op));
    ASSERT_EQ(r.exit_code, 0) << op << "\n" << r.output;
    EXPECT_NE(r.output.find("# Out of bounds values : 0 OK"), std::string::npos) << op << "\n" << r.output;
  }
}

// sendrecv shifts a ring: rank r receives rank r - 1's pattern (checked out
// of place; in place the send and the receive share a buffer and race, so
// nccl-tests' column is timed but not checked); one rank has no peer.
TEST(BenchCollectiveTest, SendRecvShiftsTheRingAndNeedsTwoRanks) {
  auto r = runCommand(spawn(3, "sendrecv --backend gloo -b 1K -e 1M -f 32 -n 2 -w 1 --json 2>/dev/null"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto doc = nlohmann::json::parse(r.output);
  EXPECT_EQ(doc["collective"], "sendrecv");
  ASSERT_EQ(doc["rows"].size(), 3u);
  for (const auto& row : doc["rows"]) {
    EXPECT_EQ(row["out_of_place"]["wrong"], 0) << row.dump();
    EXPECT_DOUBLE_EQ(row["out_of_place"]["busbw_gbps"].get<double>(), row["out_of_place"]["algbw_gbps"].get<double>())
        << "sendrecv's bus bandwidth is its algorithm bandwidth";
  }
  auto one = runCommand(spawn(1, "sendrecv --backend gloo -b 8 -e 8"));
  EXPECT_NE(one.exit_code, 0);
  EXPECT_NE(one.output.find("dtrain bench sendrecv: each rank sends to the next and receives from the previous; "
                            "expected at least 2 ranks, got 1"),
            std::string::npos)
      << one.output;
}

TEST(BenchCollectiveTest, JsonOutputParses) {
  auto r = runCommand(spawn(2, "allreduce --backend gloo -b 1K -e 4K -f 2 -n 2 -w 0 --json 2>/dev/null"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto doc = nlohmann::json::parse(r.output);
  EXPECT_EQ(doc["collective"], "allreduce");
  EXPECT_EQ(doc["ranks"], 2);
  ASSERT_EQ(doc["rows"].size(), 3u);
  EXPECT_EQ(doc["rows"][0]["size"], 1024);
  EXPECT_EQ(doc["rows"][2]["in_place"]["wrong"], 0);
  EXPECT_GT(doc["rows"][2]["out_of_place"]["busbw_gbps"].get<double>(), 0.0);
}

struct BadInput {
  const char* args;
  const char* expected;
};

TEST(BenchCollectiveTest, BadFlagsExitTwoNamingTheInput) {
  const BadInput cases[] = {
      {"allreduce -b 12Q", "-b/--minbytes '12Q': not a size; expected a size in bytes"},
      {"allreduce -b 1G -e 8", "-b/--minbytes 1G is larger than -e/--maxbytes 8"},
      {"allreduce --frobnicate", "The following argument was not expected: --frobnicate"},
      {"allreduce -d float7", "-d/--datatype 'float7': not a dtype; expected a dtype"},
      {"allreduce -o mean", "-o/--op 'mean': not a reduce op; expected sum, avg, min, max, prod or all"},
      {"allreduce -n 0", "-n/--iters '0': out of range; expected an integer from 1 to 16777216"},
      {"allreduce --backend mpi", "--backend 'mpi': unknown; expected one of auto, gloo or nccl"},
      {"allreduce --timeout nan", "--timeout 'nan': not a finite number"},
      {"allreduce -c 2", "-c/--check '2': out of range; expected an integer from 0 to 1"},
  };
  for (const auto& c : cases) {
    auto r = runCommand("RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(freePort()) + " " +
                        dtrainBin() + " bench " + c.args, 30);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.args << "\n" << r.output;
  }
}

TEST(BenchCollectiveTest, MissingEnvironmentIsAUsageError) {
  auto r = runCommand("env -u RANK -u WORLD_SIZE " + dtrainBin() + " bench allreduce --backend gloo", 30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("WORLD_SIZE is not set"), std::string::npos) << r.output;
}

TEST(BenchCollectiveTest, UnreachableStoreFailsWithinDeadlineNamingIt) {
  int port = freePort();
  auto r = runCommand("DTRAIN_STORE_CONNECT_TIMEOUT=2 RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                      std::to_string(port) + " " + dtrainBin() + " bench allreduce --backend gloo", 30);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "must not hang\n" << r.output;
  EXPECT_NE(r.output.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << r.output;
}

// Rank 0 in the background with `rank0_env`, rank 1 in the foreground with
// `rank1_env`, both of a tiny all-reduce job; returns rank 1's result.
CommandResult runRankOneBesideRankZero(const std::string& rank0_env, const std::string& rank1_env) {
  std::string common = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(freePort()) +
                       " DTRAIN_STORE_CONNECT_TIMEOUT=10 ";
  std::string job = dtrainBin() + " bench allreduce --backend gloo --timeout 5 -b 8 -e 8";
  return runCommand("(" + common + rank0_env + " " + job + " >/dev/null 2>&1 &) ; sleep 0.5; " + common +
                        rank1_env + " " + job, 60);
}

TEST(BenchCollectiveTest, WrongTokenIsRefused) {
  auto r = runRankOneBesideRankZero("RANK=0 WORLD_SIZE=2 DTRAIN_STORE_TOKEN=right",
                                    "RANK=1 WORLD_SIZE=2 DTRAIN_STORE_TOKEN=wrong");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("authentication failed"), std::string::npos) << r.output;
}

TEST(BenchCollectiveTest, WorldSizeMismatchIsNamed) {
  auto r = runRankOneBesideRankZero("RANK=0 WORLD_SIZE=3", "RANK=1 WORLD_SIZE=2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("WORLD_SIZE mismatch"), std::string::npos) << r.output;
}

TEST(SettingsCommandTest, MarkdownMatchesDocs) {
  auto r = runCommand(dtrainBin() + " settings --markdown", 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto docs = runCommand("sed -n \"/^## Environment variables/,\\$p\" " + sourceDir() + "/docs/settings.md", 30);
  EXPECT_EQ(docs.output, r.output) << "docs/settings.md is stale: regenerate it with "
                                      "`dtrain settings --markdown`";
}

}  // namespace
}  // namespace dtrain::testing
