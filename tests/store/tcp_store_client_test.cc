// The TcpStore client's connection: connect deadline and authentication.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <functional>
#include <thread>

#include "common/error.h"
#include "store/tcp_store.h"
#include "store_test_util.h"

namespace dtrain::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(TcpStoreClientTest, NoServerIsATimeoutErrorNamingHostPortWithinTheDeadline) {
  uint16_t port = freePort();
  TcpStoreClientOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.connect_timeout = milliseconds(300);
  auto started = std::chrono::steady_clock::now();
  try {
    TcpStore store(options);
    FAIL() << "connected to a port nobody listens on";
  } catch (const TimeoutError& e) {
    EXPECT_NE(e.message().find("could not connect to the store at 127.0.0.1:" + std::to_string(port) +
                               " within 0.3 s"),
              std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find("Connection refused"), std::string::npos) << e.message();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, seconds(10)) << "retries overran the deadline";
}

TEST(TcpStoreClientTest, AnUnresolvableHostIsATimeoutErrorNamingIt) {
  TcpStoreClientOptions options;
  options.host = "no-such-host.invalid";
  options.port = 29500;
  options.connect_timeout = milliseconds(100);
  try {
    TcpStore store(options);
    FAIL() << "resolved a .invalid name";
  } catch (const TimeoutError& e) {
    EXPECT_NE(e.message().find("no-such-host.invalid:29500"), std::string::npos) << e.message();
  }
}

TEST(TcpStoreClientTest, ConnectRetriesUntilTheServerComesUp) {
  uint16_t port = freePort();
  TcpStoreServerOptions server_options = loopbackServerOptions();
  server_options.port = port;
  std::unique_ptr<TcpStoreServer> server;
  std::thread late_start([&] {
    std::this_thread::sleep_for(milliseconds(200));
    server = std::make_unique<TcpStoreServer>(server_options);
  });
  TcpStoreClientOptions options;
  options.port = port;
  options.connect_timeout = seconds(30);
  std::unique_ptr<TcpStore> store;
  EXPECT_NO_THROW(store = std::make_unique<TcpStore>(options));
  late_start.join();
  if (store) {
    store->set("k", "v");
    EXPECT_EQ(store->get("k"), "v");
  }
}

class TokenTest : public ::testing::Test {
 protected:
  TokenTest() : server_(withToken("s3cret")) {}
  static TcpStoreServerOptions withToken(const std::string& token) {
    TcpStoreServerOptions options = loopbackServerOptions();
    options.token = token;
    return options;
  }
  void expectRefused(const std::string& token) {
    try {
      TcpStore store(clientOptionsFor(server_, token));
      FAIL() << "connected with token '" << token << "'";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.message(), "store at 127.0.0.1:" + std::to_string(server_.port()) +
                                 " refused the connection: authentication failed (check "
                                 "DTRAIN_STORE_TOKEN / DTRAIN_STORE_TOKEN_FILE)");
    }
  }
  TcpStoreServer server_;
};

TEST_F(TokenTest, TheRightTokenIsAccepted) {
  TcpStore store(clientOptionsFor(server_, "s3cret"));
  store.set("authenticated", "yes");
  EXPECT_EQ(store.get("authenticated"), "yes");
}

TEST_F(TokenTest, AMissingTokenIsRefused) { expectRefused(""); }
TEST_F(TokenTest, AWrongTokenIsRefused) { expectRefused("s3cres"); }
TEST_F(TokenTest, ALongerTokenIsRefused) { expectRefused("s3cret-and-more"); }

TEST_F(TokenTest, RefusedClientsDoNotDisturbAcceptedOnes) {
  TcpStore store(clientOptionsFor(server_, "s3cret"));
  expectRefused("nope");
  store.set("k", "v");
  EXPECT_EQ(store.get("k"), "v");
  EXPECT_TRUE(eventually([&] { return server_.numClients() == 1; }));
}

// A one-connection server that follows a script instead of the protocol, for
// what a real TcpStoreServer never does.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::function<void(RawFrames&)> script)
      : listener_(listenTcp("127.0.0.1", 0, 1)), port_(localPort(listener_.get())) {
    thread_ = std::thread([this, script = std::move(script)] {
      if (!pollUntil(listener_.get(), POLLIN, std::chrono::steady_clock::now() + seconds(20))) return;
      RawFrames peer(FileDescriptor(::accept(listener_.get(), nullptr, nullptr)));
      script(peer);
      done_.wait(false);  // keep the connection open until the test ends
    });
  }
  ~ScriptedServer() {
    done_ = true;
    done_.notify_all();
    thread_.join();
  }
  uint16_t port() const { return port_; }

 private:
  FileDescriptor listener_;
  uint16_t port_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

TcpStoreClientOptions optionsFor(const ScriptedServer& server) {
  TcpStoreClientOptions options;
  options.port = server.port();
  options.connect_timeout = seconds(10);
  options.timeout = milliseconds(100);
  return options;
}

TEST(TcpStoreClientTest, AServerThatStopsAnsweringTripsTheClientSideSafetyNet) {
  ScriptedServer silent([](RawFrames& peer) {
    peer.readFrame();  // HELLO
    peer.sendBytes(FrameWriter(ReplyStatus::kOk).u32(kStoreProtocolVersion).finish());
    peer.readFrame();  // the SET, never answered
  });
  TcpStoreClientOptions options = optionsFor(silent);
  options.request_timeout = seconds(2);
  TcpStore store(options);
  auto started = std::chrono::steady_clock::now();
  try {
    store.set("k", "v");
    FAIL() << "a request without a reply returned";
  } catch (const TimeoutError& e) {
    EXPECT_NE(e.message().find("127.0.0.1:" + std::to_string(silent.port()) + " did not reply"),
              std::string::npos) << e.message();
  }
  const auto waited = std::chrono::steady_clock::now() - started;
  EXPECT_GE(waited, milliseconds(1900));
  EXPECT_LT(waited, seconds(5));
  // A late reply would be misread as the next answer, so the client gives up
  // the connection; the next request connects again, and this server never
  // greets a second connection.
  EXPECT_THROW(store.get("k"), Error);
}

TEST(TcpStoreClientTest, AClientConnectsAgainWhenTheServerComesBack) {
  auto server = std::make_unique<TcpStoreServer>(loopbackServerOptions());
  const uint16_t port = server->port();
  TcpStoreClientOptions options;
  options.port = port;
  options.connect_timeout = seconds(10);
  options.request_timeout = seconds(1);
  TcpStore store(options);
  store.set("k", "1");
  server.reset();
  EXPECT_THROW(store.set("k", "2"), IoError);
  TcpStoreServerOptions again = loopbackServerOptions();
  again.port = port;
  server = std::make_unique<TcpStoreServer>(again);
  store.set("k", "3");  // a fresh connection to the new server
  EXPECT_EQ(store.get("k"), "3");
}

TEST(TcpStoreClientTest, AnEphemeralKeyIsDeletedWhenItsClientGoesAway) {
  TcpStoreServer server(loopbackServerOptions());
  TcpStoreClientOptions options;
  options.port = server.port();
  TcpStore watcher(options);
  auto owner = std::make_unique<TcpStore>(options);
  owner->setEphemeral("present/7", "1");
  EXPECT_EQ(watcher.get("present/7"), "1");
  owner.reset();
  const auto deadline = std::chrono::steady_clock::now() + seconds(5);
  while (watcher.check({"present/7"}) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_FALSE(watcher.check({"present/7"}));
}

TEST(TcpStoreClientTest, ADeadlineScopeBoundsARequestQueuedBehindABlockedOne) {
  TcpStoreServer server(loopbackServerOptions());
  TcpStoreClientOptions options;
  options.port = server.port();
  options.timeout = seconds(5);
  TcpStore store(options);
  std::thread blocked([&] { EXPECT_THROW(store.get("never"), TimeoutError); });
  std::this_thread::sleep_for(milliseconds(200));  // the get() holds the connection
  const auto started = std::chrono::steady_clock::now();
  {
    StoreDeadlineScope scope(milliseconds(300));
    try {
      store.check({"k"});
      FAIL() << "a request queued behind a 5 s get() returned within its 0.3 s scope";
    } catch (const TimeoutError& e) {
      EXPECT_NE(e.message().find("previous request was still unanswered"), std::string::npos) << e.message();
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, seconds(2));
  blocked.join();
  EXPECT_FALSE(store.check({"k"}));  // the connection is still usable
}

TEST(TcpStoreClientTest, ADeadlineScopeShortensAWaitOnAServerThatStopsAnswering) {
  ScriptedServer silent([](RawFrames& peer) {
    peer.readFrame();  // HELLO
    peer.sendBytes(FrameWriter(ReplyStatus::kOk).u32(kStoreProtocolVersion).finish());
    peer.readFrame();  // the GET, never answered
  });
  TcpStoreClientOptions options = optionsFor(silent);
  options.timeout = seconds(300);
  TcpStore store(options);
  const auto started = std::chrono::steady_clock::now();
  {
    StoreDeadlineScope scope(milliseconds(500));
    EXPECT_THROW(store.get("k"), TimeoutError);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, seconds(2));
}

TEST(TcpStoreClientTest, AVersionRefusalIsAConfigErrorCarryingTheServersMessage) {
  ScriptedServer newer([](RawFrames& peer) {
    peer.readFrame();
    peer.sendBytes(FrameWriter(ReplyStatus::kRefused)
                       .u8(static_cast<uint8_t>(RefusalReason::kProtocolVersion))
                       .bytes("protocol version mismatch: the client speaks version 1, the server "
                              "speaks version 2")
                       .finish());
  });
  try {
    TcpStore store(optionsFor(newer));
    FAIL() << "connected to a server that refused";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.message(), "store at 127.0.0.1:" + std::to_string(newer.port()) +
                               " refused the connection: protocol version mismatch: the client "
                               "speaks version 1, the server speaks version 2");
  }
}

TEST(TcpStoreClientTest, AServerWithoutATokenAcceptsAnyClient) {
  TcpStoreServer server(loopbackServerOptions());
  TcpStore store(clientOptionsFor(server, "unneeded"));
  EXPECT_EQ(store.add("n", 1), 1);
}

}  // namespace
}  // namespace dtrain::testing
