// The dynamic (c10d) rendezvous: agents as threads over a real
// TcpStoreServer on 127.0.0.1, hosted by whichever agent comes first.
#include "rendezvous/dynamic_rendezvous.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "common/error.h"
#include "rendezvous_test_util.h"
#include "common/process.h"
#include "tests/support/forked_child.h"

namespace dtrain::testing {
namespace {

RendezvousConfig dynamicConfig(uint16_t port, int min_nodes, int max_nodes, int local_world_size = 1) {
  RendezvousConfig config = testConfig("c10d", port);
  config.min_nodes = min_nodes;
  config.max_nodes = max_nodes;
  config.local_world_size = local_world_size;
  return config;
}

TEST(DynamicRendezvousTest, TwoAgentsOfTwoFormOneWorld) {
  const uint16_t port = freePort();
  auto handlers = createAll({dynamicConfig(port, 2, 2, 3), dynamicConfig(port, 2, 2, 2)});
  const auto start = SteadyClock::now();
  std::vector<RendezvousResult> results = rendezvousAll(pointers(handlers));
  expectConsistentRound(results, {3, 2});
  EXPECT_EQ(results[0].generation, 0);
  EXPECT_EQ(results[0].world_size, 5);
  EXPECT_LT(secondsSince(start), 2.0) << "max nodes joined: no last-call wait";
  EXPECT_EQ(results[0].master_addr, "127.0.0.1");
  EXPECT_EQ(handlers[0]->numNodesWaiting(), 0);
  // The round's store is the job store under this generation's prefix.
  results[0].store->set("k", "v");
  EXPECT_EQ(results[1].root_store->get("/run/test-run/gen/0/k"), "v");
}

TEST(DynamicRendezvousTest, ALateJoinerWaitsIsCountedAndGetsInTheNextRound) {
  const uint16_t port = freePort();
  auto handlers = createAll({dynamicConfig(port, 2, 3), dynamicConfig(port, 2, 3)});
  std::vector<RendezvousResult> first = rendezvousAll(pointers(handlers));
  expectConsistentRound(first, {1, 1});
  EXPECT_EQ(handlers[0]->numNodesWaiting(), 0);

  handlers.push_back(createRendezvousHandler(dynamicConfig(port, 2, 3)));
  auto late = std::async(std::launch::async, [&] { return handlers[2]->nextRendezvous(); });
  EXPECT_TRUE(eventually([&] { return handlers[0]->numNodesWaiting() == 1; }));
  EXPECT_EQ(handlers[1]->numNodesWaiting(), 1);

  // The running agents come back (as the elastic agent does) and all three
  // form the next generation.
  std::vector<RendezvousResult> second = rendezvousAll({handlers[0].get(), handlers[1].get()});
  second.push_back(late.get());
  expectConsistentRound(second, {1, 1, 1});
  EXPECT_EQ(second[0].generation, first[0].generation + 1);
  EXPECT_EQ(second[0].world_size, 3);
  EXPECT_EQ(handlers[2]->numNodesWaiting(), 0);
}

// A node whose agent goes away (here: its handler is destroyed, closing its
// connections) is dropped from the next round as soon as its presence key
// is gone; silence alone (a machine that vanished) is the counters' job,
// tested in keep_alive_test.cc.
TEST(DynamicRendezvousTest, ANodeThatGoesAwayIsDroppedFromTheNextRound) {
  const uint16_t port = freePort();
  std::vector<RendezvousConfig> configs(3, dynamicConfig(port, 2, 3));
  for (auto& config : configs) {
    config.keep_alive_interval = milliseconds(100);
    config.keep_alive_max_attempt = 6;  // dead after 600 ms of silence
  }
  // handlers[0] comes first, so it hosts the store; the one that vanishes must not.
  std::vector<std::unique_ptr<RendezvousHandler>> handlers;
  handlers.push_back(createRendezvousHandler(configs[0]));
  for (auto& handler : createAll({configs[1], configs[2]})) handlers.push_back(std::move(handler));
  std::vector<RendezvousResult> first = rendezvousAll(pointers(handlers));
  expectConsistentRound(first, {1, 1, 1});

  // Node 2 vanishes without a word: its keep-alive stops with it.
  const auto start = SteadyClock::now();
  handlers.erase(handlers.begin() + 2);
  std::vector<RendezvousResult> second = rendezvousAll(pointers(handlers));
  expectConsistentRound(second, {1, 1});
  EXPECT_EQ(second[0].generation, first[0].generation + 1);
  EXPECT_EQ(second[0].group_world_size, 2);
  EXPECT_LT(secondsSince(start), 10.0);
}

// An agent in its own process, forked before the test starts any thread:
// it joins one round, then idles until killed.
int joinOneRoundAndIdle(const RendezvousConfig& config) {
  auto handler = createRendezvousHandler(config);
  handler->nextRendezvous();
  ::sleep(60);  // killed long before; the bound keeps strays from lingering
  return 0;
}

TEST(DynamicRendezvousTest, AKilledAgentProcessIsDroppedFromTheNextRound) {
  const uint16_t port = freePort();
  RendezvousConfig config = dynamicConfig(port, 2, 3);
  config.keep_alive_interval = milliseconds(100);
  config.keep_alive_max_attempt = 6;
  RendezvousConfig victim_config = config;
  victim_config.is_host = 0;  // the parent's agents host and outlive it
  ForkedChild victim([&](const ChildSide&) { return joinOneRoundAndIdle(victim_config); });

  auto handlers = createAll({config, config});
  std::vector<RendezvousResult> first = rendezvousAll(pointers(handlers));
  EXPECT_EQ(first[0].group_world_size, 3) << "the forked agent took part";
  victim.kill(SIGKILL);
  const int status = victim.reap();
  EXPECT_TRUE(WIFSIGNALED(status)) << "the agent exited by itself: " << describeWaitStatus(status);
  std::vector<RendezvousResult> second = rendezvousAll(pointers(handlers));
  expectConsistentRound(second, {1, 1});
  EXPECT_EQ(second[0].generation, first[0].generation + 1);
}

// The re-formation after a node's agent dies: its store connection closes,
// its presence key goes with it, and the survivors' round completes as soon
// as every node of the last round still alive is back: neither the
// heartbeat threshold (15 s here) nor the last call (10 s) is waited out.
TEST(DynamicRendezvousTest, AKilledAgentIsDroppedAtOnceAndTheSurvivorsDoNotWaitTheLastCall) {
  const uint16_t port = freePort();
  RendezvousConfig config = dynamicConfig(port, 2, 3);
  config.keep_alive_interval = seconds(1);
  config.keep_alive_max_attempt = 15;
  config.last_call_timeout = seconds(10);
  RendezvousConfig victim_config = config;
  victim_config.is_host = 0;
  ForkedChild victim([&](const ChildSide&) { return joinOneRoundAndIdle(victim_config); });

  auto handlers = createAll({config, config});
  std::vector<RendezvousResult> first = rendezvousAll(pointers(handlers));
  ASSERT_EQ(first[0].group_world_size, 3);
  std::this_thread::sleep_for(milliseconds(1500));  // every keep-alive has seen every presence key
  victim.kill(SIGKILL);
  victim.reap();
  const auto start = SteadyClock::now();
  std::vector<RendezvousResult> second = rendezvousAll(pointers(handlers));
  const double elapsed = secondsSince(start);
  expectConsistentRound(second, {1, 1});
  EXPECT_EQ(second[0].generation, first[0].generation + 1);
  EXPECT_LT(elapsed, 4.0) << "waited for the heartbeat threshold or the last call";
}

// A restart with every node alive: all of the last round are back, so the
// round does not wait out the last call either.
TEST(DynamicRendezvousTest, ARestartWithEveryNodeBackDoesNotWaitTheLastCall) {
  const uint16_t port = freePort();
  std::vector<RendezvousConfig> configs(2, dynamicConfig(port, 2, 3));
  for (auto& config : configs) config.last_call_timeout = seconds(3);
  auto handlers = createAll(configs);
  std::vector<RendezvousResult> first = rendezvousAll(pointers(handlers));  // waits the last call once
  const auto start = SteadyClock::now();
  std::vector<RendezvousResult> second = rendezvousAll(pointers(handlers));
  expectConsistentRound(second, {1, 1});
  EXPECT_LT(secondsSince(start), 2.0);
}

TEST(DynamicRendezvousTest, BelowMaxTheRoundClosesWhenTheLastCallEnds) {
  const uint16_t port = freePort();
  std::vector<RendezvousConfig> configs(2, dynamicConfig(port, 2, 3));
  for (auto& config : configs) config.last_call_timeout = milliseconds(700);
  auto handlers = createAll(configs);
  const auto start = SteadyClock::now();
  std::vector<RendezvousResult> results = rendezvousAll(pointers(handlers));
  const double elapsed = secondsSince(start);
  expectConsistentRound(results, {1, 1});
  EXPECT_GE(elapsed, 0.7 - 0.05) << "closed before the last call ended";
  EXPECT_LT(elapsed, 5.0);
}

TEST(DynamicRendezvousTest, BelowMinTheJoinTimesOutSayingHowManyJoined) {
  RendezvousConfig config = dynamicConfig(freePort(), 2, 2);
  config.join_timeout = milliseconds(400);
  config.run_id = "lonely";
  auto handler = createRendezvousHandler(config);
  const auto start = SteadyClock::now();
  try {
    handler->nextRendezvous();
    FAIL() << "a round of one formed with min 2";
  } catch (const TimeoutError& e) {
    EXPECT_NE(e.message().find("1 of 2 nodes joined"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("'lonely'"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("127.0.0.1:" + std::to_string(config.endpoint_port)), std::string::npos)
        << e.message();
  }
  EXPECT_GE(secondsSince(start), 0.35);
  EXPECT_LT(secondsSince(start), 3.0);
  // It withdrew: a second agent does not find it in the round.
  config.join_timeout = seconds(15);
  config.last_call_timeout = milliseconds(100);
  config.min_nodes = 1;
  auto other = createRendezvousHandler(config);
  EXPECT_EQ(other->nextRendezvous().group_world_size, 1);
}

TEST(DynamicRendezvousTest, AnUnreachableEndpointTimesOutWithinTheJoinTimeout) {
  RendezvousConfig config = dynamicConfig(freePort(), 1, 1);
  config.is_host = 0;
  config.join_timeout = milliseconds(500);
  const auto start = SteadyClock::now();
  try {
    createRendezvousHandler(config)->nextRendezvous();
    FAIL() << "reached a store that does not exist";
  } catch (const TimeoutError& e) {
    EXPECT_NE(e.message().find("127.0.0.1:" + std::to_string(config.endpoint_port)), std::string::npos)
        << e.message();
  }
  EXPECT_GE(secondsSince(start), 0.45);
  EXPECT_LT(secondsSince(start), 3.0);
}

TEST(DynamicRendezvousTest, ShutdownEndsWaitingAgentsAndRefusesLaterJoiners) {
  const uint16_t port = freePort();
  auto handlers = createAll({dynamicConfig(port, 2, 2), dynamicConfig(port, 2, 2)});
  auto waiting = std::async(std::launch::async, [&] { return handlers[0]->nextRendezvous(); });
  std::this_thread::sleep_for(milliseconds(100));
  handlers[1]->shutdown();
  try {
    waiting.get();
    FAIL() << "the round completed without node 1";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.message().find("rendezvous 'test-run' is closed"), std::string::npos) << e.message();
  }
  auto later = createRendezvousHandler(dynamicConfig(port, 2, 2));
  EXPECT_THROW(later->nextRendezvous(), ConfigError);
  EXPECT_EQ(handlers[0]->numNodesWaiting(), 0);
}

TEST(DynamicRendezvousTest, RanksFollowJoinOrderAndEveryRoundIsANewGeneration) {
  const uint16_t port = freePort();
  auto handlers = createAll({dynamicConfig(port, 1, 1)});
  for (int64_t generation = 0; generation < 3; ++generation) {
    RendezvousResult result = handlers[0]->nextRendezvous();
    EXPECT_EQ(result.generation, generation);
    EXPECT_EQ(result.group_rank, 0);
    EXPECT_EQ(result.world_size, 1);
  }
}

}  // namespace
}  // namespace dtrain::testing
