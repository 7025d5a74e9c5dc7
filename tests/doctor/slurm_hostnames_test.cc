// `dtrain slurm hostnames` against Slurm's own `scontrol show hostnames` on a
// table of expressions, and the expressions both reject. scontrol reads a
// slurm.conf even for this (without one it looks for a DNS SRV record and
// gives up), so the test writes a minimal one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/command.h"
#include "tests/support/temp_dir.h"

namespace dtrain::testing {
namespace {

namespace fs = std::filesystem;

// runCommand wraps the line in single quotes; no expression holds '"', '$' or '\\'.
std::string quoted(const std::string& text) { return "\"" + text + "\""; }

class SlurmHostnamesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(makeTempDir("dtrain-slurm-hostnames"));
    std::ofstream(*dir_ + "/slurm.conf") << "ClusterName=hostlist\nSlurmctldHost=localhost\n";
  }
  static void TearDownTestSuite() {
    removeTree(*dir_);
    delete dir_;
  }

  static CommandResult scontrol(const std::string& expression) {
    return runCommand("SLURM_CONF=" + *dir_ + "/slurm.conf scontrol show hostnames " + quoted(expression), 30);
  }
  static CommandResult dtrain(const std::string& expression) {
    return runCommand(dtrainBin() + " slurm hostnames " + quoted(expression), 30);
  }

  static std::string* dir_;
};
std::string* SlurmHostnamesTest::dir_ = nullptr;

TEST_F(SlurmHostnamesTest, ScontrolIsInstalled) {
  auto r = runCommand("command -v scontrol", 10);
  ASSERT_EQ(r.exit_code, 0) << "scontrol is not installed (Debian package slurm-client; scripts/setup.sh installs it)";
}

TEST_F(SlurmHostnamesTest, SameNamesAsScontrol) {
  const std::vector<std::pair<std::string, size_t>> table = {
      {"node1", 1},                    // a single host
      {"n[1-3]", 3},                   // a range
      {"n[001-010]", 10},              // zero padding from the low end
      {"n[1-010]", 10},                // no padding when the low end has none
      {"n[01-3]", 3},                  // padding wider than the high end
      {"n[009-011]", 3},               // padding across a power of ten
      {"n[9-11]", 3},                  // width grows
      {"tux[0-5,12]", 7},              // a comma inside brackets
      {"n[1-2,4-5]", 4},               // two ranges in one bracket
      {"a[1,1]", 2},                   // duplicates kept
      {"r[1-2]n[1-2]", 4},             // two bracket groups: the first outermost
      {"n[0-2]x[1-2],m[5]", 7},        // groups and commas outside brackets
      {"a1,b[2-3],c", 4},              // commas outside brackets
      {",a,,b,", 2},                   // empty items skipped
      {"n[1-2],n1", 3},                // repeats across items kept, not sorted
      {"gpu-a100-[01-04]", 4},         // dashes in the prefix
      {"a b", 2},                      // whitespace separates like a comma
      {"[1-2]", 2},                    // brackets alone
      {"rack[1-2]-node[08-10]", 6},    // text between groups
  };
  for (const auto& [expression, count] : table) {
    auto want = scontrol(expression);
    ASSERT_EQ(want.exit_code, 0) << expression << ": " << want.output;
    auto got = dtrain(expression);
    ASSERT_EQ(got.exit_code, 0) << expression << ": " << got.output;
    EXPECT_EQ(got.output, want.output) << "expression " << expression;
    EXPECT_EQ(static_cast<size_t>(std::count(got.output.begin(), got.output.end(), '\n')), count)
        << expression << ":\n" << got.output;
  }
}

// Expressions Slurm refuses ("Invalid hostlist", on stderr, yet exit 0) are
// an error naming the expression, exit 2.
TEST_F(SlurmHostnamesTest, ExpressionsBothRejectExitTwo) {
  for (const std::string expression :
       {"n[3-1]", "tux[1-2]-ib", "a[1-2]b", "n[x]", "n[]", "n[1-2]]", "n[1-2,-3]", "node-[1-3].ib", "n[1[2]]"}) {
    auto want = scontrol(expression);
    EXPECT_NE(want.output.find("Invalid hostlist"), std::string::npos) << expression << ": " << want.output;
    auto got = dtrain(expression);
    EXPECT_EQ(got.exit_code, 2) << expression << ": " << got.output;
    EXPECT_NE(got.output.find("hostlist \"" + expression + "\""), std::string::npos) << got.output;
  }
}

// Slurm mangles these ("n[1-2" prints "n]"); dtrain refuses them.
TEST_F(SlurmHostnamesTest, UnbalancedBracketsExitTwo) {
  for (const std::string expression : {"n[", "n[1-2", "n1]"}) {
    auto got = dtrain(expression);
    EXPECT_EQ(got.exit_code, 2) << quoted(expression) << ": " << got.output;
    EXPECT_NE(got.output.find("hostlist \"" + expression + "\""), std::string::npos) << got.output;
  }
}

TEST_F(SlurmHostnamesTest, NoExpressionReadsSlurmJobNodelist) {
  auto from_env = runCommand("SLURM_JOB_NODELIST='gpu[1-2]' " + dtrainBin() + " slurm hostnames", 30);
  EXPECT_EQ(from_env.exit_code, 0) << from_env.output;
  EXPECT_EQ(from_env.output, "gpu1\ngpu2\n");
  auto neither = runCommand("env -u SLURM_JOB_NODELIST " + dtrainBin() + " slurm hostnames", 30);
  EXPECT_EQ(neither.exit_code, 2) << neither.output;
  EXPECT_NE(neither.output.find("expected a hostlist expression"), std::string::npos) << neither.output;
  auto empty = runCommand("SLURM_JOB_NODELIST=n1 " + dtrainBin() + " slurm hostnames \"\"", 30);
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
  EXPECT_NE(empty.output.find("hostlist \"\": no host names"), std::string::npos) << empty.output;
}

}  // namespace
}  // namespace dtrain::testing
