// TcpStore end to end: the Store contract over TCP, 1,024 concurrent
// clients, real forked rank processes (one of them killed), and what a
// client sees when the server goes away.
#include "store/tcp_store.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <future>
#include <latch>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "store_contract.h"
#include "store_test_util.h"
#include "tests/support/forked_child.h"

namespace dtrain::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class TcpStoreHarness : public StoreHarness {
 public:
  std::shared_ptr<Store> client() override {
    return std::make_shared<TcpStore>(clientOptionsFor(server_));
  }

 private:
  TcpStoreServer server_{loopbackServerOptions()};
};

INSTANTIATE_TEST_SUITE_P(
    TcpStore, StoreContractTest,
    ::testing::Values(StoreImplementation{
        "TcpStore", [] { return std::make_unique<TcpStoreHarness>(); }}),
    implementationName);

TEST(TcpStoreTest, ThousandAndTwentyFourConcurrentClientsThenABarrier) {
  constexpr int kClients = 1024;
  raiseOpenFileLimit();  // 2 descriptors per client in this one process
  TcpStoreServer server(loopbackServerOptions());
  std::latch all_connected(kClients + 1);
  std::latch may_disconnect(1);
  std::atomic<int> failures{0};
  std::mutex first_error_mutex;
  std::string first_error;
  std::vector<std::thread> threads;
  threads.reserve(kClients);
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      bool counted = false;
      try {
        TcpStore store(clientOptionsFor(server));
        const std::string key = "client/" + std::to_string(i);
        store.set(key, std::to_string(i * 7));
        int64_t after_add = store.add("clients", 1);
        if (after_add < 1 || after_add > kClients) {
          throw CommError("add returned " + std::to_string(after_add));
        }
        if (store.get(key) != std::to_string(i * 7)) throw CommError("get returned a wrong value");
        storeBarrier(store, "all-clients", kClients, seconds(120));
        // Past the barrier every client has added.
        if (store.get("clients") != std::to_string(kClients)) throw CommError("count is short");
        all_connected.count_down();
        counted = true;
        may_disconnect.wait();
      } catch (const std::exception& e) {
        failures.fetch_add(1);
        std::lock_guard<std::mutex> lock(first_error_mutex);
        if (first_error.empty()) first_error = e.what();
        if (!counted) all_connected.count_down();
      }
    });
  }
  all_connected.arrive_and_wait();
  EXPECT_EQ(failures.load(), 0) << first_error;
  EXPECT_EQ(server.numClients(), size_t{kClients}) << "every client holds its own connection";
  may_disconnect.count_down();
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0) << first_error;
  EXPECT_TRUE(eventually([&] { return server.numClients() == 0; }));
  TcpStore check(clientOptionsFor(server));
  EXPECT_EQ(check.get("client/1023"), std::to_string(1023 * 7));
}

TEST(TcpStoreTest, ValuesOfTensOfMegabytesRoundTrip) {
  // Larger than any socket buffer: the server's partial writes and EPOLLOUT
  // path carry the reply.
  TcpStoreServer server(loopbackServerOptions());
  TcpStore writer(clientOptionsFor(server));
  TcpStore reader(clientOptionsFor(server));
  std::string big(48 << 20, '\0');
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>(i / 4096);
  writer.set("big", big);
  EXPECT_TRUE(reader.get("big") == big);
  EXPECT_TRUE(writer.get("big") == big);
  reader.set("small", "after");
  EXPECT_EQ(writer.get("small"), "after");
}

TEST(TcpStoreTest, ABracketedIpv6HostIsAccepted) {
  TcpStoreServerOptions options;
  options.bind_address = "::1";
  std::unique_ptr<TcpStoreServer> server;
  try {
    server = std::make_unique<TcpStoreServer>(options);
  } catch (const IoError& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.message();
  }
  TcpStoreClientOptions client = clientOptionsFor(*server);
  client.host = "[::1]";
  TcpStore store(client);
  EXPECT_EQ(store.add("n", 1), 1);
}

TEST(TcpStoreTest, OneClientIsSafeToShareBetweenThreads) {
  TcpStoreServer server(loopbackServerOptions());
  TcpStore shared(clientOptionsFor(server));
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < 200; ++j) {
        shared.add("shared-counter", 1);
        shared.set("t" + std::to_string(i), std::to_string(j));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(shared.get("shared-counter"), "1600");
  EXPECT_EQ(shared.get("t3"), "199");
}

TEST(TcpStoreTest, AWaitTheServerTimedOutLeavesTheConnectionUsable) {
  TcpStoreServer server(loopbackServerOptions());
  TcpStore store(clientOptionsFor(server));
  EXPECT_THROW(store.wait({"not-yet"}, milliseconds(100)), TimeoutError);
  store.setTimeout(milliseconds(100));
  EXPECT_THROW(store.get("not-yet"), TimeoutError);
  // Were a late reply still in flight, these would read the wrong answers.
  store.set("not-yet", "here");
  EXPECT_EQ(store.get("not-yet"), "here");
  EXPECT_EQ(store.add("n", 2), 2);
}

TEST(TcpStoreTest, DestroyingTheServerFailsAWaitingClientWithIoError) {
  auto server = std::make_unique<TcpStoreServer>(loopbackServerOptions());
  TcpStoreClientOptions options = clientOptionsFor(*server);
  options.request_timeout = seconds(2);  // the reconnect below fails within it
  TcpStore store(options);
  const std::string where = "127.0.0.1:" + std::to_string(server->port());
  auto waiting = std::async(std::launch::async, [&] { store.wait({"never"}, seconds(120)); });
  std::this_thread::sleep_for(milliseconds(100));  // let the wait reach the server
  server.reset();
  ASSERT_EQ(waiting.wait_for(seconds(30)), std::future_status::ready) << "the client hangs";
  try {
    waiting.get();
    FAIL() << "wait() returned although the server is gone";
  } catch (const IoError& e) {
    EXPECT_NE(e.message().find(where), std::string::npos) << e.message();
  }
  EXPECT_THROW(store.set("k", "v"), IoError) << "the connection stays failed";
}

TEST(TcpStoreTest, BindsToIpv6AndHostNames) {
  for (const std::string host : {"::1", "localhost"}) {
    SCOPED_TRACE(host);
    TcpStoreServerOptions options;
    options.bind_address = host;
    std::unique_ptr<TcpStoreServer> server;
    try {
      server = std::make_unique<TcpStoreServer>(options);
    } catch (const IoError& e) {
      if (host == "::1") GTEST_SKIP() << "no IPv6 loopback here: " << e.message();
      throw;
    }
    EXPECT_NE(server->port(), 0);
    TcpStoreClientOptions client = clientOptionsFor(*server);
    client.host = host;
    TcpStore store(client);
    store.set("k", host);
    EXPECT_EQ(store.get("k"), host);
  }
}

TEST(TcpStoreTest, APortInUseIsAnIoErrorNamingTheAddress) {
  TcpStoreServer first(loopbackServerOptions());
  TcpStoreServerOptions options = loopbackServerOptions();
  options.port = first.port();
  try {
    TcpStoreServer second(options);
    FAIL() << "two servers listen on one port";
  } catch (const IoError& e) {
    EXPECT_NE(e.message().find("127.0.0.1:" + std::to_string(first.port())), std::string::npos)
        << e.message();
  }
}

// The port a Start::kLater child was given by start().
TcpStoreClientOptions childClientOptions(const ChildSide& side) {
  const auto port = static_cast<uint16_t>(std::stoi(side.message));
  TcpStoreClientOptions options;
  options.port = port;
  options.connect_timeout = seconds(30);
  options.timeout = seconds(60);
  return options;
}

TEST(TcpStoreTest, ForkedRanksAddToOneCounter) {
  constexpr int kRanks = 8;
  // Forked before the server starts its thread; each rank gets its port.
  ForkedRanks ranks(kRanks, [](const ChildSide& side) {
    TcpStore store(childClientOptions(side));
    store.add("counter", side.rank + 1);
    store.set("rank/" + std::to_string(side.rank), std::to_string(getpid()));
    storeBarrier(store, "exit", kRanks, seconds(60));
    return 0;
  }, ForkedChild::Start::kLater);
  TcpStoreServer server(loopbackServerOptions());
  ranks.startAll(std::to_string(server.port()));
  for (int rank = 0; rank < kRanks; ++rank) {
    int status = ranks[rank].reap();
    ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  TcpStore parent(clientOptionsFor(server));
  EXPECT_EQ(parent.get("counter"), std::to_string(kRanks * (kRanks + 1) / 2));
  EXPECT_TRUE(parent.check({"rank/0", "rank/7"}));
}

TEST(TcpStoreTest, AKilledClientProcessDoesNotDisturbTheServer) {
  ForkedChild victim([](const ChildSide& side) {
    TcpStore store(childClientOptions(side));
    store.set("victim/ready", "1");
    store.wait({"never-for-the-victim"}, seconds(120));  // killed in here
    return 0;
  }, ForkedChild::Start::kLater);
  TcpStoreServer server(loopbackServerOptions());
  victim.start(std::to_string(server.port()));
  TcpStore parent(clientOptionsFor(server));
  EXPECT_EQ(parent.get("victim/ready"), "1");
  ASSERT_TRUE(eventually([&] { return server.numClients() == 2; }));
  std::this_thread::sleep_for(milliseconds(50));  // let the victim's wait arrive
  victim.kill(SIGKILL);
  int status = victim.reap();
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_TRUE(eventually([&] { return server.numClients() == 1; }))
      << "the dead client's connection was not cleaned up";
  // Setting the key the dead client waited for must not reach its old connection.
  parent.set("never-for-the-victim", "now");
  EXPECT_EQ(parent.add("after-kill", 1), 1);
  TcpStore newcomer(clientOptionsFor(server));
  EXPECT_EQ(newcomer.get("never-for-the-victim"), "now");
}

}  // namespace
}  // namespace dtrain::testing
