// What TcpStoreServer does with bad input from a raw socket: it logs an
// error naming the peer, closes that connection only, and keeps serving
// everyone else.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "store/tcp_store.h"
#include "store_test_util.h"

namespace dtrain::testing {
namespace {

using ::testing::internal::CaptureStderr;
using ::testing::internal::GetCapturedStderr;

std::string frameHeader(uint32_t length) {
  std::string header(4, '\0');
  for (int i = 0; i < 4; ++i) header[i] = static_cast<char>((length >> (24 - 8 * i)) & 0xff);
  return header;
}

// A bystander client connected before the bad one, to show it is unaffected.
void expectStillServing(TcpStore& bystander, TcpStoreServer& server) {
  bystander.set("still", "serving");
  EXPECT_EQ(bystander.get("still"), "serving");
  int64_t after_add = bystander.add("bystander-ops", 1);
  EXPECT_EQ(bystander.add("bystander-ops", 0), after_add);
  EXPECT_TRUE(eventually([&] { return server.numClients() == 1; }))
      << "the bad connection was not closed";
}

struct BadInput {
  const char* name;
  bool say_hello_first;
  std::string bytes;
  const char* logged;  // what the server's error line must say
};

void PrintTo(const BadInput& input, std::ostream* os) { *os << input.name; }

class MalformedInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(MalformedInputTest, ClosesOnlyThatConnectionAndLogsThePeer) {
  const BadInput& input = GetParam();
  TcpStoreServerOptions options = loopbackServerOptions();
  options.max_frame_bytes = 1024;
  TcpStoreServer server(options);
  TcpStore bystander(clientOptionsFor(server));
  bystander.set("before", "1");

  CaptureStderr();
  {
    RawConnection raw(server.port());
    if (input.say_hello_first) {
      ASSERT_FALSE(raw.hello().empty());
    }
    raw.sendBytes(input.bytes);
    EXPECT_TRUE(raw.closedByServer());
  }
  std::string log = GetCapturedStderr();
  EXPECT_NE(log.find("ERROR"), std::string::npos) << log;
  EXPECT_NE(log.find("closing the connection from 127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find(input.logged), std::string::npos) << log;

  EXPECT_EQ(bystander.get("before"), "1");
  expectStillServing(bystander, server);
}

INSTANTIATE_TEST_SUITE_P(
    BadFrames, MalformedInputTest,
    ::testing::Values(
        BadInput{"UnknownOp", true, FrameWriter(StoreOp{0x7f}).bytes("k").finish(), "unknown op 127"},
        BadInput{"TruncatedField", true,
                 frameHeader(1 + 4 + 3) + std::string("\x02\x00\x00\x00\x64" "abc", 8),
                 "truncated field 'key'"},
        BadInput{"EmptyFrame", true, frameHeader(0), "truncated field 'op'"},
        BadInput{"TrailingBytes", true, FrameWriter(StoreOp::kNumKeys).bytes("extra").finish(),
                 "unexpected bytes after the fields of a NUM_KEYS frame"},
        BadInput{"OversizedFrame", true, frameHeader(4096), "frame of 4096 bytes exceeds the limit of 1024"},
        BadInput{"HugeLength", true, frameHeader(0xffffffffu), "exceeds the limit"},
        BadInput{"RequestBeforeHello", false, FrameWriter(StoreOp::kSet).bytes("k").bytes("v").finish(),
                 "expected HELLO as the first frame, got SET"},
        BadInput{"SecondHello", true,
                 FrameWriter(StoreOp::kHello).u32(kStoreProtocolVersion).bytes("").finish(),
                 "HELLO sent again"}),
    [](const ::testing::TestParamInfo<BadInput>& info) { return std::string(info.param.name); });

TEST(TcpStoreServerTest, AWrongProtocolVersionIsRefusedNamingBothVersions) {
  TcpStoreServer server(loopbackServerOptions());
  RawConnection raw(server.port());
  std::string reply = raw.hello(kStoreProtocolVersion + 98);
  PayloadReader in(reply);
  EXPECT_EQ(in.u8("status"), static_cast<uint8_t>(ReplyStatus::kRefused));
  EXPECT_EQ(in.u8("reason"), static_cast<uint8_t>(RefusalReason::kProtocolVersion));
  std::string message = in.bytes("message");
  EXPECT_NE(message.find("client speaks version " + std::to_string(kStoreProtocolVersion + 98)),
            std::string::npos) << message;
  EXPECT_NE(message.find("server speaks version " + std::to_string(kStoreProtocolVersion)),
            std::string::npos) << message;
  EXPECT_TRUE(raw.closedByServer());
}

TEST(TcpStoreServerTest, AFrameOverTheLimitFromTcpStoreIsAnIoErrorForThatClientOnly) {
  TcpStoreServerOptions options = loopbackServerOptions();
  options.max_frame_bytes = 1024;
  TcpStoreServer server(options);
  TcpStore bystander(clientOptionsFor(server));
  TcpStore sender(clientOptionsFor(server));
  CaptureStderr();
  try {
    sender.set("big", std::string(4096, 'x'));
    GetCapturedStderr();
    FAIL() << "the server accepted a frame over its limit";
  } catch (const IoError& e) {
    GetCapturedStderr();
    EXPECT_NE(e.message().find("127.0.0.1:" + std::to_string(server.port())), std::string::npos)
        << e.message();
  }
  expectStillServing(bystander, server);
}

TEST(TcpStoreServerTest, PipelinedRequestsAreAnsweredInOrder) {
  TcpStoreServer server(loopbackServerOptions());
  RawConnection raw(server.port());
  ASSERT_FALSE(raw.hello().empty());
  // A deferred GET first: what follows must wait behind it, not overtake it.
  raw.sendBytes(FrameWriter(StoreOp::kGet).bytes("later").i64(60'000).finish() +
                FrameWriter(StoreOp::kAdd).bytes("n").i64(5).finish());
  TcpStore other(clientOptionsFor(server));
  other.set("later", "value");
  auto first = raw.readFrame();
  auto second = raw.readFrame();
  ASSERT_TRUE(first && second);
  PayloadReader get_reply(*first);
  EXPECT_EQ(get_reply.u8("status"), static_cast<uint8_t>(ReplyStatus::kOk));
  EXPECT_EQ(get_reply.bytes("value"), "value");
  PayloadReader add_reply(*second);
  EXPECT_EQ(add_reply.u8("status"), static_cast<uint8_t>(ReplyStatus::kOk));
  EXPECT_EQ(add_reply.i64("value"), 5);
}

TEST(TcpStoreServerTest, CountsConnectedClients) {
  TcpStoreServer server(loopbackServerOptions());
  EXPECT_NE(server.port(), 0) << "port 0 asks for a real ephemeral port";
  EXPECT_EQ(server.numClients(), 0u);
  {
    TcpStore a(clientOptionsFor(server));
    TcpStore b(clientOptionsFor(server));
    EXPECT_TRUE(eventually([&] { return server.numClients() == 2; }));
  }
  EXPECT_TRUE(eventually([&] { return server.numClients() == 0; }));
}

}  // namespace
}  // namespace dtrain::testing

namespace dtrain::testing {
namespace {

// The serving loop failing (an OS error, made here by the test hook) is not
// silent: failure() names it, a client blocked in wait() gets an error at
// once instead of its timeout, and new clients are refused.
TEST(TcpStoreServerFailureTest, TheOwnerAndTheClientsLearnOfIt) {
  TcpStoreServerOptions options = loopbackServerOptions();
  std::atomic<bool> fail{false};
  options.loop_hook = [&fail] {
    if (fail.load()) throw IoError("epoll_wait() failed: Bad file descriptor (errno 9)");
  };
  CaptureStderr();
  TcpStoreServer server(options);
  TcpStore client(clientOptionsFor(server));
  TcpStore poker(clientOptionsFor(server));  // a second connection, to make the loop turn
  client.set("up", "1");
  EXPECT_EQ(server.failure(), "");

  std::string error;
  std::chrono::steady_clock::time_point failed_at;
  std::thread waiter([&] {
    try {
      client.wait({"never-set"}, std::chrono::seconds(60));
    } catch (const Error& e) {
      error = e.message();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  failed_at = std::chrono::steady_clock::now();
  fail = true;
  try {
    poker.set("wake", "the loop");  // may or may not be answered
  } catch (const Error&) {
  }
  waiter.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - failed_at).count();
  const std::string log = GetCapturedStderr();
  EXPECT_FALSE(error.empty()) << "wait() returned although the server died";
  EXPECT_LT(seconds, 5.0) << "the client waited for its timeout: " << error;
  EXPECT_TRUE(eventually([&] { return !server.failure().empty(); }));
  EXPECT_NE(server.failure().find("stopped serving: epoll_wait() failed"), std::string::npos) << server.failure();
  EXPECT_NE(log.find("stopped serving"), std::string::npos) << log;

  TcpStoreClientOptions late = clientOptionsFor(server);
  late.connect_timeout = std::chrono::milliseconds(500);
  EXPECT_THROW(TcpStore refused(late), Error) << "a new client was accepted by a dead server";
}

}  // namespace
}  // namespace dtrain::testing
