// The static rendezvous: agents as threads over a real TcpStoreServer on
// 127.0.0.1 (node rank 0 hosts it).
#include "rendezvous/static_rendezvous.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "rendezvous_test_util.h"

namespace dtrain::testing {
namespace {

std::vector<RendezvousConfig> staticConfigs(uint16_t port, const std::vector<int>& local_world_sizes,
                                            int max_nodes) {
  std::vector<RendezvousConfig> configs;
  for (size_t rank = 0; rank < local_world_sizes.size(); ++rank) {
    RendezvousConfig config = testConfig("static", port);
    config.min_nodes = config.max_nodes = max_nodes;
    config.node_rank = static_cast<int>(rank);
    config.local_world_size = local_world_sizes[rank];
    configs.push_back(config);
  }
  return configs;
}

TEST(StaticRendezvousTest, ThreeAgentsAgreeOnWorldOffsetsAndGeneration) {
  const std::vector<int> sizes = {2, 1, 3};
  auto handlers = createAll(staticConfigs(freePort(), sizes, 3));
  for (int64_t generation = 0; generation < 2; ++generation) {
    std::vector<RendezvousResult> results = rendezvousAll(pointers(handlers));
    expectConsistentRound(results, sizes);
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_EQ(results[rank].generation, generation) << "each call is the next generation";
      EXPECT_EQ(results[rank].group_rank, rank) << "group rank is the node rank";
      EXPECT_EQ(results[rank].master_addr, "127.0.0.1");
      EXPECT_EQ(results[rank].store_host, "127.0.0.1");
    }
    EXPECT_EQ(results[1].rank_offset, 2);
    EXPECT_EQ(results[2].rank_offset, 3);
    EXPECT_EQ(results[2].world_size, 6);
    // The round's store is the job store under this generation's prefix.
    results[1].store->set("nccl_id", "g" + std::to_string(generation));
    EXPECT_EQ(results[2].root_store->get("/run/test-run/gen/" + std::to_string(generation) + "/nccl_id"),
              "g" + std::to_string(generation));
  }
}

TEST(StaticRendezvousTest, AMissingNodeTimesOutNamingItsRank) {
  std::vector<RendezvousConfig> configs = staticConfigs(freePort(), {1, 1}, 4);  // ranks 2, 3 never come
  for (auto& config : configs) config.join_timeout = milliseconds(500);
  auto handlers = createAll(configs);
  const auto start = SteadyClock::now();
  std::vector<std::function<std::string()>> tasks;
  for (auto& handler : handlers) {
    tasks.push_back([&handler]() -> std::string {
      try {
        handler->nextRendezvous();
      } catch (const TimeoutError& e) {
        return e.message();
      }
      return "(no TimeoutError)";
    });
  }
  auto futures = startAll(std::move(tasks));
  for (const std::string& message : getAll(futures)) {
    EXPECT_NE(message.find("2 of 4 nodes joined; missing node ranks: 2, 3"), std::string::npos)
        << message;
    EXPECT_NE(message.find("'test-run'"), std::string::npos) << message;
  }
  EXPECT_LT(secondsSince(start), 5.0);
}

TEST(StaticRendezvousTest, ShutdownEndsAWaitingAgentAndRefusesLaterOnes) {
  auto handlers = createAll(staticConfigs(freePort(), {1, 1}, 2));
  auto waiting = std::async(std::launch::async, [&] { return handlers[0]->nextRendezvous(); });
  std::this_thread::sleep_for(milliseconds(100));
  handlers[1]->shutdown();
  try {
    waiting.get();
    FAIL() << "the round completed without node 1";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.message().find("rendezvous 'test-run' is closed"), std::string::npos) << e.message();
  }
  EXPECT_THROW(handlers[1]->nextRendezvous(), ConfigError);
}

}  // namespace
}  // namespace dtrain::testing
