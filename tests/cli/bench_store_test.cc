// `dtrain bench store` end to end: the numbers it prints, the open-file
// limit named before it runs out, and --timeout kept when no server answers.
#include <gtest/gtest.h>

#include <chrono>

#include "tests/support/command.h"
#include "tests/support/ports.h"

namespace dtrain::testing {
namespace {

TEST(BenchStoreTest, InProcessServerPrintsTheTable) {
  auto r = runCommand(dtrainBin() + " bench store --clients 4 --ops 20 --barriers 2 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dtrain store benchmark: 4 clients x 20 rounds of set+get+add, 2 barriers"),
            std::string::npos) << r.output;
}

TEST(BenchStoreTest, TooFewDescriptorsNamesTheLimitAndHowToRaiseIt) {
  // A soft and hard limit of 256: 300 clients with the in-process server need ~664.
  auto r = runCommand("ulimit -n 256 && " + dtrainBin() + " bench store --clients 300 --ops 1 2>&1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--clients 300 needs about 664 open files (two per client with the in-process server, "
                          "plus 64), but this process may open 256 (RLIMIT_NOFILE; hard limit 256). Raise it with "
                          "`ulimit -n 664`"),
            std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Too many open files"), std::string::npos) << r.output;
}

TEST(BenchStoreTest, NoServerFailsWithinTheTimeoutGiven) {
  const int port = freePort();  // nothing listens there
  for (const std::string& where : {"--host 127.0.0.1 --port " + std::to_string(port), std::string("--host nosuch.invalid --port 29500")}) {
    const auto started = std::chrono::steady_clock::now();
    auto r = runCommand(dtrainBin() + " bench store " + where + " --clients 2 --timeout 2 2>&1");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("could not connect to the store at"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("within 2 s"), std::string::npos) << r.output;
    EXPECT_LT(seconds, 6.0) << where << " kept retrying past --timeout 2:\n" << r.output;
  }
}

}  // namespace
}  // namespace dtrain::testing
