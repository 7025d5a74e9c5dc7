// createRendezvousHandler(): backends, config checks, who hosts the store.
#include "rendezvous/rendezvous.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "rendezvous_test_util.h"
#include "tests/support/text.h"

namespace dtrain::testing {
namespace {

std::string handlerError(const RendezvousConfig& config) {
  return configErrorOf([&] { createRendezvousHandler(config); });
}

// The backend is an enum (an unknown word is refused where it is parsed:
// dtrain launch --rdzv-backend); messages name it as the flag spells it.
TEST(RendezvousTest, BackendsAreNamedAsTheFlagSpellsThem) {
  EXPECT_EQ(rendezvousBackendName(RendezvousBackend::kStatic), "static");
  EXPECT_EQ(rendezvousBackendName(RendezvousBackend::kC10d), "c10d");
  EXPECT_EQ(rendezvousBackendName(RendezvousBackend::kEtcd), "etcd");
}

TEST(RendezvousTest, TheEtcdBackendWithoutEndpointsIsAConfigErrorSayingSo) {
  RendezvousConfig config = testConfig("etcd", 29400);
  const std::string message = handlerError(config);
  EXPECT_NE(message.find("no etcd endpoints"), std::string::npos) << message;
}

struct BadConfig {
  std::string what;
  std::function<void(RendezvousConfig&)> change;
  std::string expected;  // part of the message
};

TEST(RendezvousTest, BadConfigsAreConfigErrorsThatSayWhatIsWrong) {
  const std::vector<BadConfig> cases = {
      {"min above max", [](auto& c) { c.backend = RendezvousBackend::kC10d; c.min_nodes = 3; c.max_nodes = 2; },
       "minimum number of nodes (3) exceeds the maximum (2)"},
      {"zero nodes", [](auto& c) { c.backend = RendezvousBackend::kC10d; c.min_nodes = 0; },
       "at least 1, got 0 (--nnodes)"},
      {"no workers", [](auto& c) { c.local_world_size = 0; }, "--nproc-per-node"},
      {"port 0", [](auto& c) { c.endpoint_port = 0; }, "port must be in 1..65535"},
      {"empty host", [](auto& c) { c.endpoint_host = ""; }, "endpoint host is empty"},
      {"empty run id", [](auto& c) { c.run_id = ""; }, "run id is empty"},
      {"join timeout", [](auto& c) { c.join_timeout = milliseconds(0); }, "join_timeout must be positive"},
      {"keep-alive", [](auto& c) { c.backend = RendezvousBackend::kC10d; c.keep_alive_max_attempt = 0; },
       "keep_alive_max_attempt"},
      {"is_host", [](auto& c) { c.is_host = 2; }, "is_host must be 0 or 1"},
      {"static without node rank", [](auto& c) { c.node_rank = -1; },
       "node rank in [0, 2), got -1 (--node-rank)"},
      {"static node rank too big", [](auto& c) { c.node_rank = 2; }, "node rank in [0, 2), got 2"},
      {"static elastic", [](auto& c) { c.min_nodes = 1; c.max_nodes = 2; },
       "fixed number of nodes, got 1:2"},
  };
  for (const auto& bad : cases) {
    RendezvousConfig config = testConfig("static", freePort());
    config.min_nodes = config.max_nodes = 2;
    config.node_rank = 1;
    bad.change(config);
    const std::string message = handlerError(config);
    EXPECT_NE(message.find(bad.expected), std::string::npos) << bad.what << ": " << message;
  }
}

TEST(RendezvousTest, DescribeNamesBackendRunAndEndpoint) {
  RendezvousConfig config = testConfig("c10d", freePort(), "job1");
  auto handler = createRendezvousHandler(config);
  EXPECT_EQ(handler->describe(),
            "c10d rendezvous 'job1' at 127.0.0.1:" + std::to_string(config.endpoint_port));
  config = testConfig("static", freePort(), "job2");
  config.node_rank = 0;
  EXPECT_EQ(createRendezvousHandler(config)->describe(),
            "static rendezvous 'job2' at 127.0.0.1:" + std::to_string(config.endpoint_port));
}

TEST(RendezvousTest, IsHostZeroNeverHostsEvenOnTheEndpointMachine) {
  RendezvousConfig config = testConfig("c10d", freePort());
  config.is_host = 0;
  config.join_timeout = milliseconds(300);
  EXPECT_THROW(createRendezvousHandler(config), TimeoutError);
  config.is_host = 1;
  auto host = createRendezvousHandler(config);
  config.is_host = 0;
  auto client = createRendezvousHandler(config);  // now something answers
}

TEST(RendezvousTest, AStaticHostWhosePortIsTakenFailsNamingTheAddress) {
  LoopbackListener squatter;
  RendezvousConfig config = testConfig("static", squatter.port());
  config.node_rank = 0;
  try {
    createRendezvousHandler(config);
    FAIL() << "hosted on a taken port";
  } catch (const IoError& e) {
    EXPECT_NE(e.message().find("127.0.0.1:" + std::to_string(squatter.port())), std::string::npos)
        << e.message();
  }
}

}  // namespace
}  // namespace dtrain::testing
