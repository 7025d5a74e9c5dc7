#include "rendezvous/job_store.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "rendezvous_test_util.h"

namespace dtrain::testing {
namespace {

TEST(JobStoreTest, TheHostServesAndEveryAgentConnects) {
  RendezvousConfig config = testConfig("c10d", freePort());
  JobStoreEndpoint host(config, StoreRole::kHost, "test");
  JobStoreEndpoint client(config, StoreRole::kClient, "test");
  EXPECT_TRUE(host.hosting());
  EXPECT_FALSE(client.hosting());
  host.client()->set("k", "v");
  EXPECT_EQ(client.client()->get("k"), "v");
  EXPECT_EQ(client.connect(seconds(5))->get("k"), "v");
  EXPECT_EQ(client.localAddress(), "127.0.0.1");

  RendezvousResult result = client.resultFor("job", 4);
  EXPECT_EQ(result.generation, 4);
  EXPECT_EQ(result.store_host, "127.0.0.1");
  EXPECT_EQ(result.store_port, config.endpoint_port);
  result.store->set("nccl_id", "x");
  EXPECT_EQ(result.root_store->get("/run/job/gen/4/nccl_id"), "x");
}

TEST(JobStoreTest, AnExplicitHostWhosePortIsTakenFailsNamingTheAddress) {
  LoopbackListener squatter;
  RendezvousConfig config = testConfig("static", squatter.port());
  try {
    JobStoreEndpoint host(config, StoreRole::kHost, "static rendezvous 'test-run'");
    FAIL() << "hosted on a taken port";
  } catch (const IoError& e) {
    EXPECT_NE(e.message().find("127.0.0.1:" + std::to_string(squatter.port())), std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find("static rendezvous 'test-run'"), std::string::npos) << e.message();
  }
}

TEST(JobStoreTest, AnInferredHostUsesTheStoreAnotherLocalAgentHosts) {
  RendezvousConfig config = testConfig("c10d", freePort());
  JobStoreEndpoint first(config, StoreRole::kHostIfFree, "test");
  JobStoreEndpoint second(config, StoreRole::kHostIfFree, "test");
  EXPECT_TRUE(first.hosting());
  EXPECT_FALSE(second.hosting());
  first.client()->set("k", "v");
  EXPECT_EQ(second.client()->get("k"), "v");
}

TEST(JobStoreTest, AgentsRacingToHostOnOneMachineEndWithExactlyOneHost) {
  // Two sockets with SO_REUSEADDR can both bind a port and then both fail
  // to listen(): the losers must find the winner, or try again.
  for (int round = 0; round < 20; ++round) {
    RendezvousConfig config = testConfig("c10d", freePort());
    std::vector<std::function<std::unique_ptr<JobStoreEndpoint>()>> agents(
        6, [config] { return std::make_unique<JobStoreEndpoint>(config, StoreRole::kHostIfFree, "test"); });
    auto futures = startAll(std::move(agents));
    auto endpoints = getAll(futures);
    int hosts = 0;
    for (const auto& endpoint : endpoints) hosts += endpoint->hosting() ? 1 : 0;
    ASSERT_EQ(hosts, 1) << "round " << round;
    EXPECT_EQ(endpoints.front()->client()->add("agents", 1) + endpoints.back()->client()->add("agents", 1), 3);
  }
}

TEST(JobStoreTest, AnInferredHostKeepsTryingWhileThePortIsNeitherFreeNorServed) {
  // Like two agents whose listen() calls collided (both fail): for a while
  // this agent can neither listen on the port nor connect to anyone there.
  // (A socket bound without SO_REUSEADDR and never listening does that.)
  const uint16_t port = freePort();
  int rival = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  ASSERT_EQ(::bind(rival, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  auto rival_gives_up = std::async(std::launch::async, [rival] {
    std::this_thread::sleep_for(milliseconds(300));
    ::close(rival);
  });
  const auto start = SteadyClock::now();
  JobStoreEndpoint endpoint(testConfig("c10d", port), StoreRole::kHostIfFree, "test");
  EXPECT_TRUE(endpoint.hosting());
  EXPECT_GE(secondsSince(start), 0.25);
  rival_gives_up.get();
}

TEST(JobStoreTest, AnUnreachableEndpointTimesOutAfterTheJoinTimeout) {
  RendezvousConfig config = testConfig("c10d", freePort());
  config.join_timeout = milliseconds(500);
  const auto start = SteadyClock::now();
  try {
    JobStoreEndpoint client(config, StoreRole::kClient, "c10d rendezvous 'test-run'");
    FAIL() << "connected to nothing";
  } catch (const TimeoutError& e) {
    EXPECT_NE(e.message().find("127.0.0.1:" + std::to_string(config.endpoint_port)), std::string::npos)
        << e.message();
  }
  EXPECT_GE(secondsSince(start), 0.45);
  EXPECT_LT(secondsSince(start), 3.0);
}

TEST(JobStoreTest, TheTokenIsRequired) {
  RendezvousConfig config = testConfig("c10d", freePort());
  config.token = "s3cret";
  JobStoreEndpoint host(config, StoreRole::kHost, "test");
  config.token = "guess";
  EXPECT_THROW(JobStoreEndpoint(config, StoreRole::kClient, "test"), ConfigError);
  config.token = "s3cret";
  JobStoreEndpoint client(config, StoreRole::kClient, "test");
  client.client()->set("k", "v");
}

TEST(JobStoreTest, TheHostKeepsServingUntilItsPeersHaveLeft) {
  RendezvousConfig config = testConfig("c10d", freePort());
  JobStoreEndpoint host(config, StoreRole::kHost, "test");
  auto peer = std::make_unique<JobStoreEndpoint>(config, StoreRole::kClient, "test");
  auto leaving = std::async(std::launch::async, [&] { host.waitForPeersToLeave(1, seconds(30)); });
  EXPECT_EQ(leaving.wait_for(milliseconds(200)), std::future_status::timeout)
      << "the host stopped waiting while a peer was connected";
  peer->client()->set("exit_barrier/done", "1");  // the peer still reaches the store
  peer.reset();
  EXPECT_EQ(leaving.wait_for(seconds(10)), std::future_status::ready);

  // A peer that never leaves holds the host for close_timeout only.
  JobStoreEndpoint lingering(config, StoreRole::kClient, "test");
  const auto start = SteadyClock::now();
  host.waitForPeersToLeave(1, milliseconds(300));
  EXPECT_GE(secondsSince(start), 0.25);
  EXPECT_LT(secondsSince(start), 3.0);
  // A client waits for nobody.
  const auto client_start = SteadyClock::now();
  lingering.waitForPeersToLeave(0, seconds(30));
  EXPECT_LT(secondsSince(client_start), 1.0);
}

TEST(JobStoreTest, AGivenLocalAddressIsUsed) {
  RendezvousConfig config = testConfig("c10d", freePort());
  config.local_address = "node7.example";
  JobStoreEndpoint host(config, StoreRole::kHost, "test");
  EXPECT_EQ(host.localAddress(), "node7.example");
}

}  // namespace
}  // namespace dtrain::testing
