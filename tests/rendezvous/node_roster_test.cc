#include "rendezvous/node_roster.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace dtrain::testing {
namespace {

TEST(NodeRosterTest, NodeInfoRoundTrips) {
  NodeInfo info = decodeNodeInfo(encodeNodeInfo({8, "10.0.0.7"}), "k");
  EXPECT_EQ(info.local_world_size, 8);
  EXPECT_EQ(info.address, "10.0.0.7");
  EXPECT_EQ(decodeNodeInfo("2 fe80::1", "k").address, "fe80::1");
}

TEST(NodeRosterTest, MalformedInfoIsAConfigErrorNamingTheKey) {
  for (const std::string text : {"", "8", "x 10.0.0.7", "0 host", "-1 host"}) {
    try {
      decodeNodeInfo(text, "/run/r/rdzv/node/3");
      FAIL() << "decoded '" << text << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(e.message().find("/run/r/rdzv/node/3"), std::string::npos) << e.message();
    }
  }
}

TEST(NodeRosterTest, WorkerRanksAreContiguousPerNodeInGroupRankOrder) {
  std::vector<NodeInfo> roster{{2, "a"}, {1, "b"}, {3, "c"}};
  const int offsets[] = {0, 2, 3};
  for (int g = 0; g < 3; ++g) {
    RendezvousResult result;
    assignRanks(roster, g, result);
    EXPECT_EQ(result.group_rank, g);
    EXPECT_EQ(result.group_world_size, 3);
    EXPECT_EQ(result.rank_offset, offsets[g]);
    EXPECT_EQ(result.world_size, 6);
    EXPECT_EQ(result.master_addr, "a") << "group rank 0's address";
  }
}

}  // namespace
}  // namespace dtrain::testing
