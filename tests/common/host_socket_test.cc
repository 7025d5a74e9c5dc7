// The host and socket seams (common/host.h, common/socket.h).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/error.h"
#include "common/host.h"
#include "common/socket.h"

namespace dtrain {
namespace {

TEST(HostTest, NameAndExecutableAreThisHostsAndThisProcesss) {
  char expected[256] = {};
  ASSERT_EQ(::gethostname(expected, sizeof(expected) - 1), 0);
  EXPECT_EQ(hostName(), expected);
  const std::string self = selfExecutablePath();
  EXPECT_NE(self.find("common_test"), std::string::npos) << self;
}

class SocketPairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    a_.reset(fds[0]);
    b_.reset(fds[1]);
    setNonBlocking(a_.get());
    setNonBlocking(b_.get());
  }
  static SteadyTime in(int ms) { return std::chrono::steady_clock::now() + std::chrono::milliseconds(ms); }
  FileDescriptor a_, b_;
};

TEST_F(SocketPairTest, ReceiveAllGetsExactlyWhatWasSent) {
  ASSERT_TRUE(sendAll(a_.get(), "hello world", in(1000)));
  char got[11];
  ASSERT_TRUE(receiveAll(b_.get(), got, sizeof(got), in(1000)));
  EXPECT_EQ(std::string(got, sizeof(got)), "hello world");
}

TEST_F(SocketPairTest, ReceiveAllStopsAtTheDeadlineOrWhenAskedTo) {
  char got[4];
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(receiveAll(b_.get(), got, sizeof(got), in(200)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(190));
  start = std::chrono::steady_clock::now();
  int asked = 0;
  EXPECT_FALSE(receiveAll(b_.get(), got, sizeof(got), in(10'000), [&] { return ++asked == 3; }));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2)) << "stop is asked every 100 ms";
}

TEST_F(SocketPairTest, AHangUpIsAnErrorSayingSo) {
  ASSERT_TRUE(sendAll(a_.get(), "ab", in(1000)));
  a_.reset();
  char got[4];
  try {
    receiveAll(b_.get(), got, sizeof(got), in(1000));
    FAIL() << "a short read after a hang-up succeeded";
  } catch (const IoError& e) {
    EXPECT_EQ(e.message(), "connection closed by the other side");
  }
}

TEST(FreeTcpPortTest, APortThatCanBeListenedOn) {
  const uint16_t port = freeTcpPort(/*loopback_only=*/true, "a test");
  EXPECT_GT(port, 0);
  FileDescriptor listening = listenTcp("127.0.0.1", port, 4);
  EXPECT_EQ(localPort(listening.get()), port);
}

}  // namespace
}  // namespace dtrain
