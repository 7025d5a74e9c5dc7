// TcpStoreServer's limits on what a client may hold: connections, time
// before HELLO, idle time, buffered bytes. Each limit answers or logs with
// its name; none cuts a client that is merely waiting or quiet but alive.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "store/tcp_store.h"
#include "store_test_util.h"

namespace dtrain::testing {
namespace {

using ::testing::internal::CaptureStderr;
using ::testing::internal::GetCapturedStderr;
using std::chrono::milliseconds;

std::string limitFrameHeader(uint32_t length) {
  std::string header(4, '\0');
  for (int i = 0; i < 4; ++i) header[i] = static_cast<char>((length >> (24 - 8 * i)) & 0xff);
  return header;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

TEST(TcpStoreServerLimitsTest, AConnectionThatNeverSaysHelloIsClosed) {
  TcpStoreServerOptions options = loopbackServerOptions();
  options.hello_timeout = milliseconds(300);
  TcpStoreServer server(options);
  CaptureStderr();
  RawConnection silent(server.port());
  const auto started = std::chrono::steady_clock::now();
  EXPECT_TRUE(silent.closedByServer());
  const auto took = std::chrono::steady_clock::now() - started;
  const std::string log = GetCapturedStderr();
  EXPECT_GE(took, milliseconds(250));
  EXPECT_NE(log.find("no HELLO within 0.3 s of connecting (TcpStoreServerOptions::hello_timeout)"),
            std::string::npos) << log;
}

TEST(TcpStoreServerLimitsTest, AnIdleConnectionIsClosedButNotAWaitingOrKeptAliveOne) {
  TcpStoreServerOptions options = loopbackServerOptions();
  options.idle_timeout = milliseconds(2500);
  TcpStoreServer server(options);
  CaptureStderr();
  // TcpStore turns TCP keep-alive on (a probe a second at this liveness).
  TcpStoreClientOptions alive_options = clientOptionsFor(server);
  alive_options.liveness_timeout = std::chrono::seconds(3);
  TcpStore alive(alive_options);
  alive.setEphemeral("alive", "1");  // gone if its connection is ever cut
  RawConnection idle(server.port());
  ASSERT_FALSE(idle.hello().empty());
  RawConnection waiting(server.port());
  ASSERT_FALSE(waiting.hello().empty());
  waiting.sendBytes(FrameWriter(StoreOp::kGet).bytes("never").i64(4000).finish());

  auto reply = waiting.readFrame(std::chrono::seconds(10));
  ASSERT_TRUE(reply) << "the idle timeout cut a client blocked in a GET";
  EXPECT_EQ(static_cast<uint8_t>((*reply)[0]), static_cast<uint8_t>(ReplyStatus::kTimeout));
  EXPECT_TRUE(idle.closedByServer());
  const std::string log = GetCapturedStderr();
  EXPECT_NE(log.find("idle for 2.5 s with no request pending and no TCP keep-alive from the peer"),
            std::string::npos) << log;
  TcpStore checker(clientOptionsFor(server));
  EXPECT_TRUE(checker.check({"alive"})) << "the kept-alive client's connection was cut";
}

TEST(TcpStoreServerLimitsTest, AClientBeyondTheConnectionLimitIsToldWhy) {
  TcpStoreServerOptions options = loopbackServerOptions();
  options.max_connections = 2;
  TcpStoreServer server(options);
  auto first = std::make_unique<TcpStore>(clientOptionsFor(server));
  TcpStore second(clientOptionsFor(server));
  CaptureStderr();
  TcpStoreClientOptions late = clientOptionsFor(server);
  late.connect_timeout = milliseconds(500);
  try {
    TcpStore third(late);
    GetCapturedStderr();
    FAIL() << "a third client was served past a limit of 2";
  } catch (const TimeoutError& e) {
    // A full server is temporary: the client tried until its deadline.
    EXPECT_NE(e.message().find("within 0.5 s: the server is at its connection limit"), std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find("at its limit of 2 connections (TcpStoreServerOptions::max_connections)"),
              std::string::npos) << e.message();
  }
  for (int i = 0; i < 20; ++i) {
    RawConnection more(server.port());
    EXPECT_FALSE(more.hello().empty()) << "a refusal, not a reset";
  }
  const std::string log = GetCapturedStderr();
  EXPECT_LE(occurrences(log, "refused 127.0.0.1:"), 2u) << "refusals are logged at most once a second\n" << log;
  // A client refused while the server is full is served once a place frees.
  TcpStoreClientOptions patient = clientOptionsFor(server);
  patient.connect_timeout = milliseconds(20000);
  auto waiting = std::async(std::launch::async, [&] {
    TcpStore again(patient);
    again.set("served", "again");
  });
  std::this_thread::sleep_for(milliseconds(300));
  first.reset();
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(15)), std::future_status::ready);
  waiting.get();
  EXPECT_EQ(second.get("served"), "again");
}

// Sockets that connect and never say HELLO fill a full server's places
// only until a client comes: the oldest of them makes room, long before its
// HELLO timeout, and a worker restarting into a flood is served at once.
TEST(TcpStoreServerLimitsTest, SilentConnectionsCannotKeepAClientOut) {
  TcpStoreServerOptions options = loopbackServerOptions();
  options.max_connections = 4;
  options.hello_timeout = std::chrono::seconds(60);
  TcpStoreServer server(options);
  TcpStore greeted(clientOptionsFor(server));
  std::vector<std::unique_ptr<RawConnection>> flood;
  for (int i = 0; i < 3; ++i) flood.push_back(std::make_unique<RawConnection>(server.port()));
  greeted.set("filled", "1");  // a loop turn later, all three are in
  CaptureStderr();
  TcpStoreClientOptions restarting = clientOptionsFor(server);
  restarting.connect_timeout = milliseconds(3000);
  const auto started = std::chrono::steady_clock::now();
  TcpStore worker(restarting);
  worker.set("worker", "served");
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(2));
  EXPECT_TRUE(flood[0]->closedByServer()) << "the oldest silent socket made room";
  const std::string log = GetCapturedStderr();
  EXPECT_NE(log.find("the oldest that has not said HELLO, to make room for 127.0.0.1:"), std::string::npos) << log;
  EXPECT_EQ(greeted.get("worker"), "served");
}

TEST(TcpStoreServerLimitsTest, BytesBufferedOverAllConnectionsAreCapped) {
  TcpStoreServerOptions options = loopbackServerOptions();
  options.max_buffered_bytes = 1u << 20;
  TcpStoreServer server(options);
  TcpStore bystander(clientOptionsFor(server));
  const std::string set = FrameWriter(StoreOp::kSet).bytes("big").bytes(std::string(900u << 10, 'a')).finish();
  RawConnection first(server.port());
  ASSERT_FALSE(first.hello().empty());
  first.sendBytes(set.substr(0, 700u << 10));
  bystander.set("first", "buffered");  // a loop turn later, the bytes are in
  CaptureStderr();
  RawConnection second(server.port());
  ASSERT_FALSE(second.hello().empty());
  second.sendBytes(limitFrameHeader(900u << 10) + std::string(700u << 10, 'b'));
  EXPECT_TRUE(second.closedByServer());
  const std::string log = GetCapturedStderr();
  EXPECT_NE(log.find("past the limit of 1048576 (TcpStoreServerOptions::max_buffered_bytes)"),
            std::string::npos) << log;
  first.sendBytes(set.substr(700u << 10));
  auto reply = first.readFrame();
  ASSERT_TRUE(reply) << "the connection within the limit was cut";
  EXPECT_EQ(static_cast<uint8_t>((*reply)[0]), static_cast<uint8_t>(ReplyStatus::kOk));
  bystander.set("still", "serving");
}

}  // namespace
}  // namespace dtrain::testing
