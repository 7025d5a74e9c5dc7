// EtcdStore against real etcd (tests/support/etcd_cluster.h): the Store
// contract on one member, leases, losing members of a three-member cluster,
// nothing to reach at all, and bad endpoint lists. Without an etcd binary the
// contract is not instantiated and the other tests skip, saying what to
// install.
#include "store/etcd_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/error.h"
#include "store_contract.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/ports.h"
#include "tests/support/text.h"

namespace dtrain::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

#define SKIP_WITHOUT_ETCD() \
  if (!EtcdCluster::available()) GTEST_SKIP() << EtcdCluster::skipReason()

// One single-member cluster for every test of this process that needs no
// cluster of its own (started at the first use, stopped at exit); each
// store gets a key prefix of its own, so each test starts empty.
EtcdCluster& sharedCluster() {
  static EtcdCluster cluster(1);
  return cluster;
}

std::string freshPrefix(const std::string& what) {
  static std::atomic<int> next{0};
  return "/test/" + what + "/" + std::to_string(next.fetch_add(1)) + "/";
}

EtcdStoreOptions optionsFor(const EtcdCluster& cluster, const std::string& prefix) {
  EtcdStoreOptions options;
  options.endpoints = parseEtcdEndpoints(cluster.clientEndpoints());
  options.key_prefix = prefix;
  options.connect_timeout = seconds(20);
  options.timeout = seconds(60);
  return options;
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class EtcdStoreHarness : public StoreHarness {
 public:
  std::shared_ptr<Store> client() override {
    return std::make_shared<EtcdStore>(optionsFor(sharedCluster(), prefix_));
  }

 private:
  std::string prefix_ = freshPrefix("contract");
};

std::vector<StoreImplementation> etcdImplementations() {
  if (!EtcdCluster::available()) return {};
  return {StoreImplementation{"EtcdStore", [] { return std::make_unique<EtcdStoreHarness>(); }}};
}

INSTANTIATE_TEST_SUITE_P(EtcdStore, StoreContractTest, ::testing::ValuesIn(etcdImplementations()),
                         implementationName);

TEST(EtcdStoreTest, OneStoreIsSafeToShareBetweenThreads) {
  SKIP_WITHOUT_ETCD();
  EtcdStore shared(optionsFor(sharedCluster(), freshPrefix("shared")));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < 25; ++j) {
        shared.add("counter", 1);
        shared.set("t" + std::to_string(i), std::to_string(j));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(shared.get("counter"), "100");
  EXPECT_EQ(shared.get("t3"), "24");
  EXPECT_EQ(shared.numKeys(), 5);
}

TEST(EtcdStoreTest, KeysLiveUnderThePrefixAndWaitReadsMoreKeysThanOneTransactionHolds) {
  SKIP_WITHOUT_ETCD();
  const std::string prefix = freshPrefix("prefix");
  EtcdStore store(optionsFor(sharedCluster(), prefix));
  EtcdStore outer(optionsFor(sharedCluster(), prefix.substr(0, prefix.size() - 1)));
  store.set("k", "v");
  EXPECT_EQ(outer.get("/k"), "v") << "the key is stored as prefix + key";
  EXPECT_EQ(outer.numKeys(), 1);
  std::vector<std::string> keys;
  for (int i = 0; i < 300; ++i) keys.push_back("many/" + std::to_string(i));
  for (size_t i = 0; i + 1 < keys.size(); ++i) store.set(keys[i], "x");
  const std::string message = errorOf<TimeoutError>([&] { store.wait(keys, milliseconds(100)); });
  EXPECT_TRUE(contains(message, prefix + "many/299")) << message;
  EXPECT_FALSE(contains(message, "many/298")) << message;
  store.set(keys.back(), "x");
  store.wait(keys, seconds(5));
  EXPECT_TRUE(store.check(keys));
}

TEST(EtcdStoreLeaseTest, AKeySetWithALeaseGoesWhenTheLeaseIsRevoked) {
  SKIP_WITHOUT_ETCD();
  EtcdStore store(optionsFor(sharedCluster(), freshPrefix("revoke")));
  const int64_t lease = store.grantLease(seconds(30));
  store.setWithLease("member/a", "alive", lease);
  store.set("plain", "stays");
  EXPECT_EQ(store.get("member/a"), "alive");
  store.revokeLease(lease);
  EXPECT_FALSE(store.check({"member/a"})) << "revoking deletes the lease's keys at once";
  EXPECT_TRUE(store.check({"plain"}));
  store.revokeLease(lease);  // already gone: not an error
  const std::string renew = errorOf<IoError>([&] { store.keepAliveLease(lease); });
  EXPECT_TRUE(contains(renew, "lease " + std::to_string(lease) + " expired")) << renew;
  const std::string set = errorOf<IoError>([&] { store.setWithLease("member/b", "late", lease); });
  EXPECT_TRUE(contains(set, "expired")) << set;
  EXPECT_FALSE(store.check({"member/b"}));
}

TEST(EtcdStoreLeaseTest, AnEphemeralKeyGoesWithItsStore) {
  SKIP_WITHOUT_ETCD();
  const std::string prefix = freshPrefix("ephemeral");
  EtcdStore watcher(optionsFor(sharedCluster(), prefix));
  auto owner = std::make_unique<EtcdStore>(optionsFor(sharedCluster(), prefix));
  owner->setEphemeral("present/1", "1");
  owner->setEphemeral("present/1", "1");  // renews the same session lease
  EXPECT_EQ(watcher.get("present/1"), "1");
  owner.reset();  // a clean exit revokes the session lease
  EXPECT_FALSE(watcher.check({"present/1"}));
}

TEST(EtcdStoreTest, ADeadlineScopeBoundsACallOnAClusterWithoutQuorum) {
  SKIP_WITHOUT_ETCD();
  EtcdCluster cluster(3);
  EtcdStoreOptions options = optionsFor(cluster, freshPrefix("scope"));
  options.request_timeout = seconds(1);
  EtcdStore store(options);
  store.set("k", "v");
  cluster.kill(0);
  cluster.kill(1);
  cluster.kill(2);
  const auto start = std::chrono::steady_clock::now();
  {
    StoreDeadlineScope bounded(milliseconds(1500));
    EXPECT_THROW(store.set("k", "w"), Error);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(4));
}

TEST(EtcdStoreLeaseTest, KeepAliveHoldsAKeyThatExpiresWithoutIt) {
  SKIP_WITHOUT_ETCD();
  EtcdStore store(optionsFor(sharedCluster(), freshPrefix("keepalive")));
  // 1 s is etcd's minimum here (1.5 election timeouts of 500 ms, rounded up).
  const int64_t lease = store.grantLease(seconds(1));
  store.setWithLease("heartbeat", "1", lease);
  // Renewed every 250 ms for three TTLs: the key stays throughout.
  const auto start = Clock::now();
  while (Clock::now() - start < seconds(3)) {
    EXPECT_EQ(store.keepAliveLease(lease), seconds(1));
    ASSERT_TRUE(store.check({"heartbeat"})) << "gone after " << secondsSince(start) << " s of keep-alives";
    std::this_thread::sleep_for(milliseconds(250));
  }
  // Not renewed: it goes within a few TTLs.
  const auto stopped = Clock::now();
  while (store.check({"heartbeat"})) {
    ASSERT_LT(secondsSince(stopped), 10.0) << "the key outlived its lease";
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_GE(secondsSince(stopped), 0.5) << "the key went before its TTL";
  const std::string message = errorOf<IoError>([&] { store.keepAliveLease(lease); });
  EXPECT_TRUE(contains(message, "expired")) << message;
}

TEST(EtcdStoreFailoverTest, LosingTheLeaderInUseIsSurvivedLosingQuorumFailsInTime) {
  SKIP_WITHOUT_ETCD();
  EtcdCluster cluster(3);
  // The client's first endpoint is the leader, so losing it costs an
  // election too: the harder case.
  const int leader = cluster.leader();
  ASSERT_GE(leader, 0) << "no member says it is the leader";
  std::vector<int> order = {leader};
  for (int i = 0; i < 3; ++i) {
    if (i != leader) order.push_back(i);
  }
  EtcdStoreOptions options = optionsFor(cluster, "/failover/");
  options.endpoints = {cluster.endpoint(order[0]), cluster.endpoint(order[1]), cluster.endpoint(order[2])};
  options.request_timeout = seconds(1);
  options.timeout = seconds(10);
  EtcdStore store(options);
  store.set("before", "1");
  EXPECT_EQ(store.add("counter", 1), 1);
  EXPECT_EQ(store.currentEndpoint(), cluster.endpoint(leader)) << "requests start at the first endpoint";

  cluster.kill(leader);
  const auto killed = Clock::now();
  store.set("after", "2");
  EXPECT_EQ(store.get("before"), "1");
  EXPECT_EQ(store.add("counter", 1), 2);
  EXPECT_EQ(store.compareSet("after", "2", "3"), "3");
  EXPECT_TRUE(store.check({"before", "after", "counter"}));
  EXPECT_LT(secondsSince(killed), 5.0) << "failing over took too long";
  const std::string in_use = store.currentEndpoint();
  EXPECT_NE(in_use, cluster.endpoint(leader));
  for (int i = 0; i < 5; ++i) store.add("counter", 1);
  EXPECT_EQ(store.currentEndpoint(), in_use) << "requests stay on the endpoint that answers";
  EtcdStore newcomer(options);  // its first endpoint is the dead one
  EXPECT_EQ(newcomer.get("counter"), "7");

  // A second member down: one of three has no quorum, so nothing is served.
  // Each request is bounded; the call fails at its deadline, naming every
  // endpoint.
  cluster.kill(in_use == cluster.endpoint(order[1]) ? order[1] : order[2]);
  store.setTimeout(seconds(2));  // get()'s deadline; set() below gets a scope of 2 s
  const auto lost = Clock::now();
  std::string message;
  {
    StoreDeadlineScope bounded(seconds(2));
    message = errorOf<IoError>([&] { store.set("no-quorum", "x"); });
  }
  const double took = secondsSince(lost);
  EXPECT_TRUE(contains(message, "lost the connection to etcd (tried " + options.endpoints[0] + ", " +
                                    options.endpoints[1] + ", " + options.endpoints[2] + ")"))
      << message;
  EXPECT_TRUE(contains(message, "no-quorum")) << message;
  EXPECT_GE(took, 1.9) << "gave up before the deadline: " << message;
  EXPECT_LT(took, 2.0 + 1.0 + 2.0) << "the deadline plus one request, with slack";
  const auto get_start = Clock::now();
  const std::string get_message = errorOf<IoError>([&] { store.get("before"); });
  EXPECT_TRUE(contains(get_message, "lost the connection to etcd")) << get_message;
  EXPECT_LT(secondsSince(get_start), 2.0 + 1.0 + 2.0);
}

TEST(EtcdStoreTest, NoEndpointAnsweringIsATimeoutNamingEveryEndpoint) {
  // Needs no etcd: two ports where nothing listens, and one that accepts
  // connections but never answers (each attempt there waits request_timeout).
  LoopbackListener silent;
  EtcdStoreOptions options;
  options.endpoints = {"127.0.0.1:" + std::to_string(freePort()),
                       "127.0.0.1:" + std::to_string(silent.port()),
                       "http://127.0.0.1:" + std::to_string(freePort())};
  options.connect_timeout = seconds(1);
  options.request_timeout = milliseconds(300);
  const auto start = Clock::now();
  const std::string message = errorOf<TimeoutError>([&] { EtcdStore store(options); });
  const double took = secondsSince(start);
  EXPECT_TRUE(contains(message, "could not reach etcd at")) << message;
  for (const auto& endpoint :
       parseEtcdEndpoints(options.endpoints[0] + "," + options.endpoints[1] + "," + options.endpoints[2])) {
    EXPECT_TRUE(contains(message, endpoint + ": ")) << endpoint << " is not named: " << message;
  }
  EXPECT_TRUE(contains(message, "no complete reply within")) << message;
  EXPECT_GE(took, 0.95) << "gave up before connect_timeout";
  EXPECT_LT(took, 1.0 + 0.3 + 1.5) << "connect_timeout plus one request, with slack";
}

TEST(EtcdStoreTest, ParsesEndpointLists) {
  EXPECT_EQ(parseEtcdEndpoints("10.0.0.1:2379"), std::vector<std::string>{"10.0.0.1:2379"});
  EXPECT_EQ(parseEtcdEndpoints("10.0.0.1:2379, http://node2:2379,[fd00::1]:2379,HTTP://[::1]:1"),
            (std::vector<std::string>{"10.0.0.1:2379", "node2:2379", "[fd00::1]:2379", "[::1]:1"}));
}

TEST(EtcdStoreTest, BadEndpointListsAreConfigErrorsNamingTheInput) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "an entry is empty"},
      {"10.0.0.1:2379,,10.0.0.2:2379", "an entry is empty"},
      {"10.0.0.1:2379,", "an entry is empty"},
      {"https://10.0.0.1:2379", "uses https://"},
      {"10.0.0.1", "'10.0.0.1' has no port"},
      {"10.0.0.1:", "has no port"},
      {":2379", "has no host"},
      {"10.0.0.1:http", "port 'http', not a number in 1..65535"},
      {"10.0.0.1:0", "not a number in 1..65535"},
      {"10.0.0.1:65536", "not a number in 1..65535"},
      {"fd00::1:2379", "IPv6 address without brackets"},
      {"[fd00::1:2379", "no ']'"},
      {"[fd00::1]2379", "not :port"},
      {"grpc://10.0.0.1:2379", "unknown scheme"},
  };
  for (const auto& [input, problem] : cases) {
    SCOPED_TRACE("input '" + input + "'");
    const std::string message = configErrorOf([&] { parseEtcdEndpoints(input); });
    EXPECT_TRUE(contains(message, "etcd endpoints '" + input + "': ")) << message;
    EXPECT_TRUE(contains(message, problem)) << message;
    EXPECT_TRUE(contains(message, "expected host:port")) << message;
  }
  EtcdStoreOptions options;
  EXPECT_TRUE(contains(configErrorOf([&] { EtcdStore store(options); }), "no endpoints"));
  options.endpoints = {"10.0.0.1:2379", "https://10.0.0.2:2379"};
  EXPECT_TRUE(contains(configErrorOf([&] { EtcdStore store(options); }),
                       "'10.0.0.1:2379,https://10.0.0.2:2379': 'https://10.0.0.2:2379' uses https://"));
}

}  // namespace
}  // namespace dtrain::testing
