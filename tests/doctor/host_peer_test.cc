// The peer test: --peers parsing, a PeerServer on loopback measured by
// measurePeer, and the ways it fails (closed port, a silent server).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <gtest/gtest.h>
#include <thread>

#include "common/error.h"
#include "doctor/host_check_functions.h"
#include "doctor/peer_link.h"
#include "tests/support/text.h"

namespace dtrain::doctor {
namespace {

using testing::contains;

TEST(PeerAddress, ParsesHostPortAndBracketedIpv6) {
  PeerAddress a = parsePeerAddress("node2:29600", "--peers", false);
  EXPECT_EQ(a.host, "node2");
  EXPECT_EQ(a.port, 29600);
  PeerAddress b = parsePeerAddress("[::1]:80", "--peers", false);
  EXPECT_EQ(b.host, "::1");
  EXPECT_EQ(b.port, 80);
  EXPECT_EQ(parsePeerAddress("127.0.0.1:0", "--serve-peer", true).port, 0);
  EXPECT_EQ(parsePeerList("a:1,b:65535").size(), 2u);
}

TEST(PeerAddress, BadEntriesNameTheEntryAndTheForm) {
  for (const char* entry : {"host", "host:", ":80", "host:0", "host:70000", "host:abc", "::1:80", "[::1]80"}) {
    try {
      parsePeerAddress(entry, "--peers", false);
      ADD_FAILURE() << entry << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.message(), std::string("--peers entry '") + entry + "'")) << e.message();
      EXPECT_TRUE(contains(e.message(), "expected HOST:PORT")) << e.message();
    }
  }
  for (const char* list : {"", "a:1,,b:2", "a:1,", ",a:1"}) {
    try {
      parsePeerList(list);
      ADD_FAILURE() << "'" << list << "' accepted";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.message(), "is empty")) << e.message();
    }
  }
}

// A PeerServer on 127.0.0.1 with a free port, served by a thread.
class LoopbackPeer {
 public:
  LoopbackPeer() : server_(parsePeerAddress("127.0.0.1:0", "--serve-peer", true)) {
    address_ = server_.boundAddress();
    thread_ = std::thread([this] { server_.serve([this] { return stop_.load(); }); });
  }
  ~LoopbackPeer() {
    stop_ = true;
    thread_.join();
  }
  const std::string& address() const { return address_; }

 private:
  PeerServer server_;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(PeerLink, MeasuresBandwidthToAServedPeer) {
  LoopbackPeer peer;
  EXPECT_EQ(peer.address().rfind("127.0.0.1:", 0), 0u) << peer.address();
  PeerMeasurement m = measurePeer(parsePeerAddress(peer.address(), "--peers", false), 10);
  ASSERT_TRUE(m.reachable) << m.error;
  EXPECT_GT(m.gbit_per_s, 0);
  EXPECT_GE(m.bytes, 1u << 20);
  EXPECT_LE(m.bytes, kPeerTransferBytes);
  EXPECT_GE(m.connect_ms, 0);
  // Two clients at once, each served by its own connection.
  PeerMeasurement a, b;
  std::thread other([&] { a = measurePeer(parsePeerAddress(peer.address(), "--peers", false), 10, 4 << 20); });
  b = measurePeer(parsePeerAddress(peer.address(), "--peers", false), 10, 4 << 20);
  other.join();
  EXPECT_TRUE(a.reachable) << a.error;
  EXPECT_TRUE(b.reachable) << b.error;
}

TEST(PeerLink, ClosedPortFailsAtOnce) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);  // bound, never listening: connections are refused
  auto start = std::chrono::steady_clock::now();
  PeerMeasurement m = measurePeer(parsePeerAddress("127.0.0.1:" + std::to_string(port), "--peers", false), 5);
  ::close(fd);
  EXPECT_FALSE(m.reachable);
  EXPECT_TRUE(contains(m.error, "refused")) << m.error;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(PeerLink, ASilentServerTimesOutWithinTheTimeout) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 4), 0);  // accepts (in the kernel) but never reads or answers
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  auto start = std::chrono::steady_clock::now();
  PeerMeasurement m =
      measurePeer(parsePeerAddress("127.0.0.1:" + std::to_string(ntohs(addr.sin_port)), "--peers", false), 1.0);
  auto took = std::chrono::steady_clock::now() - start;
  ::close(fd);
  EXPECT_FALSE(m.reachable);
  EXPECT_FALSE(m.error.empty());
  EXPECT_LT(took, std::chrono::milliseconds(2500));
  EXPECT_GE(took, std::chrono::milliseconds(900));
}

TEST(PeerLink, UnresolvableHostFails) {
  PeerMeasurement m = measurePeer(parsePeerAddress("no-such-host.invalid:80", "--peers", false), 2);
  EXPECT_FALSE(m.reachable);
  EXPECT_TRUE(contains(m.error, "cannot resolve 'no-such-host.invalid'")) << m.error;
}

TEST(PeerLink, ServerDropsClientsThatAreNotPeers) {
  LoopbackPeer peer;
  std::string address = peer.address();
  int port = std::stoi(address.substr(address.rfind(':') + 1));
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const char request[] = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_GT(::send(fd, request, sizeof(request) - 1, 0), 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buffer[16];
  // Closed: an orderly end (0) or a reset (the request was not read to its end).
  ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
  EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET)) << "recv gave " << n << ", errno " << errno;
  ::close(fd);
  // ...and still serves real peers.
  EXPECT_TRUE(measurePeer(parsePeerAddress(address, "--peers", false), 5, 1 << 20).reachable);
}

TEST(PeerCheck, ReportsEachPeerAndFailsNamingTheUnreachableOne) {
  LoopbackPeer peer;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::string closed = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));

  SystemRoot root("/");
  std::map<std::string, std::string> env;
  DoctorOptions options;
  options.timeout_seconds = 5;
  options.peers = {peer.address()};
  DoctorContext ctx{root, env, options, nullptr, {}};
  CheckResult good = checkPeersReachable(ctx);
  EXPECT_EQ(good.status, Status::kPass) << good.reason;
  EXPECT_TRUE(contains(good.reason, "Gbit/s")) << good.reason;
  EXPECT_TRUE(contains(good.detail, peer.address() + ": connect ")) << good.detail;

  options.peers = {peer.address(), closed};
  CheckResult bad = checkPeersReachable(ctx);
  ::close(fd);
  EXPECT_EQ(bad.status, Status::kFail) << bad.reason;
  EXPECT_TRUE(contains(bad.reason, "1 of 2 peer(s) unreachable: " + closed)) << bad.reason;
  EXPECT_TRUE(contains(bad.detail, peer.address() + ": connect ")) << bad.detail;
  EXPECT_FALSE(bad.hint.empty());
}

}  // namespace
}  // namespace dtrain::doctor
