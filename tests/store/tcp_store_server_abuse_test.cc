// What one abusive client can cost the others: memory before HELLO, memory
// held by quiet connections, and the event loop's time. Uses only the
// server's defaults, so the same test measures any build.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <thread>

#include "common/log.h"
#include "common/socket.h"
#include "store/tcp_store.h"
#include "store_test_util.h"

namespace dtrain::testing {
namespace {

using ::testing::internal::CaptureStderr;
using ::testing::internal::GetCapturedStderr;
using std::chrono::milliseconds;

size_t residentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

std::string abuseFrameHeader(uint32_t length) {
  std::string header(4, '\0');
  for (int i = 0; i < 4; ++i) header[i] = static_cast<char>((length >> (24 - 8 * i)) & 0xff);
  return header;
}

// `count` distinct 3-byte keys: the most keys a frame of a given size holds.
std::vector<std::string> distinctKeys(size_t count, size_t first = 0) {
  std::vector<std::string> keys;
  keys.reserve(count);
  for (size_t i = first; i < first + count; ++i) {
    keys.push_back({static_cast<char>(i >> 16), static_cast<char>(i >> 8), static_cast<char>(i)});
  }
  return keys;
}

uint8_t statusOf(const std::optional<std::string>& reply) {
  return reply && !reply->empty() ? static_cast<uint8_t>((*reply)[0]) : 0xff;
}

TEST(TcpStoreServerAbuseTest, ALargeFrameBeforeHelloIsRefusedAtItsHeader) {
  TcpStoreServer server(loopbackServerOptions());
  CaptureStderr();
  RawConnection raw(server.port());
  // A HELLO is a version and a token; 60 MiB is not one, and the server
  // should not wait for (and buffer) the rest to find out.
  raw.sendBytes(abuseFrameHeader(60u << 20) + std::string(1024, 'x'));
  const bool closed = !raw.readFrame(milliseconds(3000)).has_value();
  const std::string log = GetCapturedStderr();
  EXPECT_TRUE(closed);
  EXPECT_NE(log.find("before HELLO"), std::string::npos) << log;
  EXPECT_NE(log.find("exceeds the limit of 8192 bytes"), std::string::npos) << log;
  TcpStore client(clientOptionsFor(server));
  client.set("still", "serving");
}

TEST(TcpStoreServerAbuseTest, QuietConnectionsHoldAlmostNoMemoryAndGiveItBack) {
  raiseOpenFileLimit();
  TcpStoreServer server(loopbackServerOptions());
  TcpStore client(clientOptionsFor(server));
  client.set("warm", "up");
  // Built first, so the test's own allocations do not count.
  const std::string big_frame = abuseFrameHeader(6u << 20) + std::string((6u << 20) - 1, 'v');
  const size_t before = residentBytes();
  constexpr size_t kQuiet = 400;
  std::vector<std::unique_ptr<RawConnection>> quiet;
  for (size_t i = 0; i < kQuiet; ++i) {
    quiet.push_back(std::make_unique<RawConnection>(server.port()));
    quiet.back()->sendBytes(std::string_view("\0", 1));  // one byte of a frame header
  }
  ASSERT_TRUE(eventually([&] { return server.numClients() == kQuiet + 1; }));
  client.set("after", "the bytes were read");  // one loop turn later, they were
  const size_t held = residentBytes() - std::min(before, residentBytes());
  RecordProperty("held_kib", static_cast<int>(held >> 10));
  EXPECT_LT(held, size_t{4} << 20) << kQuiet << " connections holding one byte each cost "
                                   << (held >> 10) << " KiB";

  // Four greeted connections each hold most of a 6 MiB frame, then leave.
  std::vector<std::unique_ptr<RawConnection>> big;
  for (int i = 0; i < 4; ++i) {
    big.push_back(std::make_unique<RawConnection>(server.port()));
    ASSERT_FALSE(big.back()->hello().empty());
    big.back()->sendBytes(big_frame);
  }
  client.set("big", "frames read");
  quiet.clear();
  big.clear();
  ASSERT_TRUE(eventually([&] { return server.numClients() == 1; }));
  // 24 MiB were held; glibc keeps some freed memory of the loop thread's
  // arena whatever malloc_trim() does, so the bound leaves it room: up to
  // 12.3 MiB stayed in a clean-clone CI run, and a server that gave nothing
  // back would keep all 24 and more.
  EXPECT_TRUE(eventually([&] { return residentBytes() < before + (size_t{16} << 20); }, milliseconds(3000)))
      << "resident memory stays " << ((residentBytes() - before) >> 10) << " KiB above where it was";
}

TEST(TcpStoreServerAbuseTest, TooManyKeysIsAnErrorReplyAndTheConnectionStaysUsable) {
  TcpStoreServer server(loopbackServerOptions());
  RawConnection raw(server.port());
  ASSERT_FALSE(raw.hello().empty());
  raw.sendBytes(FrameWriter(StoreOp::kWait).strings(distinctKeys(65537)).i64(100).finish());
  auto reply = raw.readFrame(milliseconds(5000));
  ASSERT_EQ(statusOf(reply), static_cast<uint8_t>(ReplyStatus::kError));
  PayloadReader in(*reply);
  in.u8("status");
  const std::string message = in.bytes("message");
  EXPECT_NE(message.find("WAIT of 65537 keys exceeds the limit of 65536 keys"), std::string::npos) << message;
  raw.sendBytes(FrameWriter(StoreOp::kSet).bytes("k").bytes("v").finish());
  EXPECT_EQ(statusOf(raw.readFrame()), static_cast<uint8_t>(ReplyStatus::kOk));
}

// A well-behaved client's worst round trip while another client sends the
// costliest requests it can: the bound is generous for a loaded 2-core
// machine (up to ~120 ms alone, 191 ms beside `ctest -j3`), and far below
// the seconds one such request used to take.
TEST(TcpStoreServerAbuseTest, OneClientsHugeRequestsDoNotStallTheOthers) {
  TcpStoreServer server(loopbackServerOptions());
  TcpStore good(clientOptionsFor(server));
  good.set("warm", "up");
  const std::string huge_wait =
      FrameWriter(StoreOp::kWait).strings(distinctKeys(4'000'000)).i64(100).finish();
  std::string checks;
  for (int i = 0; i < 8; ++i) checks += FrameWriter(StoreOp::kCheck).strings(distinctKeys(65536, i)).finish();
  std::atomic<bool> done{false};
  std::atomic<int> rounds{0};
  std::thread abuser([&] {
    RawConnection raw(server.port());
    if (raw.hello().empty()) return;
    while (!done) {
      raw.sendBytes(huge_wait);
      if (!raw.readFrame(std::chrono::seconds(30))) return;
      raw.sendBytes(checks);
      for (int i = 0; i < 8; ++i) {
        if (!raw.readFrame(std::chrono::seconds(30))) return;
      }
      ++rounds;
    }
  });
  auto worst = std::chrono::steady_clock::duration::zero();
  for (int i = 0; i < 200 || (rounds < 2 && i < 100'000); ++i) {
    auto started = std::chrono::steady_clock::now();
    good.set("k" + std::to_string(i % 8), "v");
    good.get("k" + std::to_string(i % 8));
    worst = std::max(worst, std::chrono::steady_clock::now() - started);
  }
  done = true;
  abuser.join();
  const auto worst_ms = std::chrono::duration_cast<milliseconds>(worst).count();
  EXPECT_LT(worst_ms, 400) << "a SET+GET took " << worst_ms << " ms while another client sent "
                           << "a WAIT of 4,000,000 keys and CHECKs of 65,536";
}

}  // namespace
}  // namespace dtrain::testing
