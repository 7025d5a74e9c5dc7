#include "common/hostlist.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/error.h"
#include "tests/support/command.h"
#include "tests/support/text.h"

namespace dtrain {
namespace {

using testing::CommandResult;
using testing::runCommand;
using testing::splitLines;

using Hosts = std::vector<std::string>;

std::string expansionError(const std::string& expression) {
  return testing::configErrorOf([&] { expandHostlist(expression); });
}

// Expansions as `scontrol show hostnames` prints them.
TEST(HostlistTest, PlainNamesAndTopLevelLists) {
  EXPECT_EQ(expandHostlist("tux"), Hosts({"tux"}));
  EXPECT_EQ(expandHostlist("node-1.cluster.local"), Hosts({"node-1.cluster.local"}));
  EXPECT_EQ(expandHostlist("a1,b[2-3],c"), Hosts({"a1", "b2", "b3", "c"}));
  EXPECT_EQ(expandHostlist("b,a,b"), Hosts({"b", "a", "b"})) << "order and duplicates kept";
  EXPECT_EQ(expandHostlist("a,,b,"), Hosts({"a", "b"})) << "empty items skipped";
  EXPECT_EQ(expandHostlist("a b\tc"), Hosts({"a", "b", "c"})) << "whitespace separates too";
}

TEST(HostlistTest, RangesAndSingleNumbers) {
  EXPECT_EQ(expandHostlist("tux[0-2,12]"), Hosts({"tux0", "tux1", "tux2", "tux12"}));
  EXPECT_EQ(expandHostlist("tux[7]"), Hosts({"tux7"}));
  EXPECT_EQ(expandHostlist("tux[3,1]"), Hosts({"tux3", "tux1"})) << "not sorted";
  EXPECT_EQ(expandHostlist("gpu[9-11]"), Hosts({"gpu9", "gpu10", "gpu11"}));
  EXPECT_EQ(expandHostlist("n[4-4]"), Hosts({"n4"}));
  EXPECT_EQ(expandHostlist("[1-2]"), Hosts({"1", "2"})) << "empty prefix";
}

TEST(HostlistTest, LeadingZerosKeepTheWidthOfLo) {
  EXPECT_EQ(expandHostlist("n[001-003]"), Hosts({"n001", "n002", "n003"}));
  EXPECT_EQ(expandHostlist("n[08-11]"), Hosts({"n08", "n09", "n10", "n11"}));
  EXPECT_EQ(expandHostlist("n[098-101]"), Hosts({"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expandHostlist("n[9-010]"), Hosts({"n9", "n10"})) << "width comes from LO";
  EXPECT_EQ(expandHostlist("n[01-2,7]"), Hosts({"n01", "n02", "n7"})) << "each range its own width";
  EXPECT_EQ(expandHostlist("n[99-100]"), Hosts({"n99", "n100"}));
}

TEST(HostlistTest, SeveralBracketsAreACartesianProductFirstOutermost) {
  EXPECT_EQ(expandHostlist("r[1-2]n[1-2]"), Hosts({"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(expandHostlist("a[1-2]-b[3-4]"), Hosts({"a1-b3", "a1-b4", "a2-b3", "a2-b4"}));
  EXPECT_EQ(expandHostlist("rack[1,3]-node[01-02]"),
            Hosts({"rack1-node01", "rack1-node02", "rack3-node01", "rack3-node02"}));
}

// Slurm 22.05's scontrol answers "Invalid hostlist" for these; so do we.
TEST(HostlistTest, TextAfterTheLastBracketIsRejectedAsSlurmDoes) {
  EXPECT_EQ(expansionError("tux[1-2]-ib0"),
            "hostlist \"tux[1-2]-ib0\": text after the last ']' (Slurm allows none) at position 8");
  EXPECT_EQ(expansionError("x[1-2]y,z[5]"), "hostlist \"x[1-2]y,z[5]\": text after the last ']' (Slurm allows none) at position 6");
}

TEST(HostlistTest, MalformedInputNamesExpressionWhatAndPosition) {
  EXPECT_EQ(expansionError(""), "hostlist \"\": no host names at position 0");
  EXPECT_EQ(expansionError(" , "), "hostlist \" , \": no host names at position 0");
  EXPECT_EQ(expansionError("tux[1-2"), "hostlist \"tux[1-2\": '[' is never closed at position 3");
  EXPECT_EQ(expansionError("tux1-2]"), "hostlist \"tux1-2]\": ']' without a matching '[' at position 6");
  EXPECT_EQ(expansionError("a[1[2]]"), "hostlist \"a[1[2]]\": nested '[' at position 3");
  EXPECT_EQ(expansionError("tux[5-2]"), "hostlist \"tux[5-2]\": range 5-2 is reversed at position 4");
  EXPECT_EQ(expansionError("tux[]"), "hostlist \"tux[]\": empty brackets at position 3");
  EXPECT_EQ(expansionError("tux[1,,2]"), "hostlist \"tux[1,,2]\": empty range at position 6");
  EXPECT_EQ(expansionError("tux[1,]"), "hostlist \"tux[1,]\": empty range at position 6");
  EXPECT_EQ(expansionError("tux[-3]"), "hostlist \"tux[-3]\": missing number at position 4");
  EXPECT_EQ(expansionError("tux[3-]"), "hostlist \"tux[3-]\": missing number at position 6");
  EXPECT_EQ(expansionError("tux[a-b]"),
            "hostlist \"tux[a-b]\": 'a' in a range (expected digits, '-' or ',') at position 4");
  EXPECT_EQ(expansionError("tux[1-2-3]"),
            "hostlist \"tux[1-2-3]\": '-' in a range (expected digits, '-' or ',') at position 7");
  EXPECT_EQ(expansionError("tux[1, 2]"),
            "hostlist \"tux[1, 2]\": ' ' in a range (expected digits, '-' or ',') at position 6");
  EXPECT_NE(expansionError("n[0-99999999]").find("expands to more than 1048576 hosts"), std::string::npos);
  EXPECT_NE(expansionError("n[0-999]m[0-999]o[0-9]").find("expands to more than 1048576 hosts"),
            std::string::npos);
}

// The same expressions through Slurm's own expander, when it is installed.
TEST(HostlistTest, AgreesWithScontrol) {
  if (std::system("command -v scontrol >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "scontrol is not installed";
  }
  // scontrol wants a configuration even to expand names; a two-line one does.
  const std::string conf = ::testing::TempDir() + "/hostlist_test_slurm.conf";
  {
    FILE* f = std::fopen(conf.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("ClusterName=hostlist\nSlurmctldHost=localhost\n", f);
    std::fclose(f);
  }
  for (const char* expression : {"tux[0-2,12]", "n[001-003]", "r[1-2]n[1-2]", "a1,b[2-3],c",
                                 "n[9-010]", "a[1-2]-b[3-4]", "rack[1,3]-node[01-02]"}) {
    const CommandResult r =
        runCommand("SLURM_CONF=" + conf + " scontrol show hostnames '" + expression + "' 2>/dev/null", 30);
    ASSERT_EQ(r.exit_code, 0) << "scontrol failed on " << expression;
    Hosts slurm;
    for (const std::string& host : splitLines(r.output)) {
      if (!host.empty()) slurm.push_back(host);
    }
    EXPECT_EQ(expandHostlist(expression), slurm) << expression;
  }
}

}  // namespace
}  // namespace dtrain
