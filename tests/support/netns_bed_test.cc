// The network-namespace test bed (tests/support/netns_bed.h): nodes reach
// each other by address and know their names; a partition stalls
// connections without a reset and heals; a pulled link likewise; kill() and
// powerOff() as a crash and a lost machine; teardown on every path, a
// crashed run's bed removed by the next; the skip when namespaces are
// unavailable. Runs where root can make namespaces, skips elsewhere.
#include "tests/support/netns_bed.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/host.h"
#include "common/process.h"
#include "common/socket.h"
#include "tests/support/command.h"
#include "tests/support/forked_child.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// An echo server for a node: argv[1] the address, argv[2] the port; one
// connection after another.
constexpr const char* kEchoServer = R"(
import socket, sys
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
while True:
    connection, _ = server.accept()
    while data := connection.recv(4096):
        connection.sendall(data)
)";

SteadyTime in(std::chrono::milliseconds limit) { return Clock::now() + limit; }

// What arrived on a socket before `size` bytes were in, the time was up,
// the other side closed it, or it failed.
struct Arrival {
  std::string bytes;
  bool closed = false;
  int error = 0;  // errno of a failed recv
};

Arrival receiveFor(int fd, size_t size, std::chrono::milliseconds limit) {
  Arrival got;
  const SteadyTime deadline = in(limit);
  while (got.bytes.size() < size && pollUntil(fd, POLLIN, deadline)) {
    char chunk[256];
    const ssize_t n = ::recv(fd, chunk, std::min(sizeof(chunk), size - got.bytes.size()), 0);
    if (n > 0) {
      got.bytes.append(chunk, static_cast<size_t>(n));
    } else if (n == 0) {
      got.closed = true;
      break;
    } else if (errno != EAGAIN && errno != EINTR) {
      got.error = errno;
      break;
    }
  }
  return got;
}

// The socket's pending error (SO_ERROR): 0 for a healthy connection.
int pendingError(int fd) {
  int error = 0;
  socklen_t length = sizeof(error);
  DTRAIN_CHECK_ERRNO(::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length));
  return error;
}

void sendText(int fd, const std::string& text) {
  if (!sendAll(fd, text, in(2s))) throw TimeoutError("send of '" + text + "' did not finish in 2 s");
}

std::string peerAddress(int fd) {
  sockaddr_in peer{};
  socklen_t length = sizeof(peer);
  DTRAIN_CHECK_ERRNO(::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length));
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &peer.sin_addr, text, sizeof(text));
  return text;
}

// Both ends of one TCP connection between two nodes, made in-process.
struct Connection {
  FileDescriptor client, server;
};

class NetnsBedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = NetnsBed::unavailableReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
  }

  static FileDescriptor listenIn(NetnsBed& bed, int node) {
    return bed.inNode(node, [&] { return listenTcp(bed.address(node), 0, 8); });
  }

  // One attempt from `client` to a listener; "" when it connected, else why not.
  static std::string connectError(NetnsBed& bed, int client, int server, const FileDescriptor& listener,
                                  std::chrono::milliseconds limit) {
    return bed.inNode(client, [&] { return connectTcpOnce(bed.address(server), localPort(listener.get()), limit); })
        .error;
  }

  static Connection connectNodes(NetnsBed& bed, int client, int server) {
    FileDescriptor listener = listenIn(bed, server);
    ConnectAttempt attempt =
        bed.inNode(client, [&] { return connectTcpOnce(bed.address(server), localPort(listener.get()), 2000ms); });
    if (!attempt.socket.valid()) throw IoError("node " + std::to_string(client) + " connecting: " + attempt.error);
    if (!pollUntil(listener.get(), POLLIN, in(2s))) throw TimeoutError("no connection to accept");
    FileDescriptor accepted(DTRAIN_CHECK_ERRNO(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK)));
    return {std::move(attempt.socket), std::move(accepted)};
  }

  // A connection from node `client` to a server program of node `server`
  // that may still be starting (refused until it listens).
  static FileDescriptor connectToProgram(NetnsBed& bed, int client, int server, uint16_t port) {
    const SteadyTime deadline = in(10s);
    std::string error;
    while (Clock::now() < deadline) {
      ConnectAttempt attempt = bed.inNode(client, [&] { return connectTcpOnce(bed.address(server), port, 1000ms); });
      if (attempt.socket.valid()) return std::move(attempt.socket);
      error = attempt.error;
      std::this_thread::sleep_for(20ms);
    }
    throw IoError("node " + std::to_string(server) + "'s server never accepted: " + error);
  }
};

TEST_F(NetnsBedTest, NodesReachEachOtherByAddressAndKnowTheirNames) {
  const auto started = Clock::now();
  NetnsBed bed(3);
  const auto built = Clock::now() - started;
  std::printf("a 3-node bed came up in %.3f s\n", std::chrono::duration<double>(built).count());
  EXPECT_LT(built, 2s);
  EXPECT_NE(bed.address(0), bed.address(1));

  // Sockets made in-process in two nodes.
  Connection c = connectNodes(bed, 1, 0);
  EXPECT_EQ(peerAddress(c.server.get()), bed.address(1));
  sendText(c.client.get(), "ping");
  EXPECT_EQ(receiveFor(c.server.get(), 4, 2s).bytes, "ping");
  sendText(c.server.get(), "pong");
  EXPECT_EQ(receiveFor(c.client.get(), 4, 2s).bytes, "pong");

  // A program started in node 2 (it can bind node 2's address only there)
  // serves node 0.
  TempDir dir("netns-bed-test");
  auto server = bed.start(2, {testPython(), "-c", kEchoServer, bed.address(2), "29500"}, {}, dir / "server.log");
  FileDescriptor client = connectToProgram(bed, 0, 2, 29500);
  sendText(client.get(), "hello");
  EXPECT_EQ(receiveFor(client.get(), 5, 5s).bytes, "hello") << server->log();
  EXPECT_TRUE(server->running()) << server->log();

  const std::string own_name = hostName();
  for (int node = 0; node < bed.size(); ++node) {
    const CommandResult name = bed.run(node, {"hostname"});
    EXPECT_EQ(name.exit_code, 0) << name.output;
    EXPECT_EQ(name.output, bed.hostname(node) + "\n");
  }
  const CommandResult resolved = bed.run(0, {"getent", "hosts", bed.hostname(1)});
  EXPECT_TRUE(contains(resolved.output, bed.address(1))) << resolved.output;
  const CommandResult host_name = runCommand("hostname", 10);
  EXPECT_EQ(host_name.output, own_name + "\n") << "the host's own name must stay as it was";
}

TEST_F(NetnsBedTest, PartitionStallsConnectionsWithoutAResetUntilHealed) {
  NetnsBed bed(3);
  Connection cut = connectNodes(bed, 1, 0);
  Connection control = connectNodes(bed, 2, 0);
  const FileDescriptor listener0 = listenIn(bed, 0);
  const FileDescriptor listener1 = listenIn(bed, 1);

  bed.partition(1);
  bed.partition(1);  // again: a no-op
  sendText(cut.client.get(), "up");
  sendText(cut.server.get(), "down");
  sendText(control.client.get(), "ok");
  EXPECT_EQ(receiveFor(control.server.get(), 2, 2s).bytes, "ok") << "node 2 is not partitioned";
  const Arrival up = receiveFor(cut.server.get(), 2, 2s);
  const Arrival down = receiveFor(cut.client.get(), 4, 100ms);
  EXPECT_EQ(up.bytes, "");
  EXPECT_EQ(down.bytes, "");
  EXPECT_FALSE(up.closed || down.closed) << "a partition must not close a connection";
  EXPECT_EQ(up.error, 0) << errnoString(up.error);
  EXPECT_EQ(down.error, 0) << errnoString(down.error);
  EXPECT_EQ(pendingError(cut.client.get()), 0);
  EXPECT_EQ(pendingError(cut.server.get()), 0);
  EXPECT_EQ(connectError(bed, 1, 0, listener0, 1000ms), "connect() timed out");
  EXPECT_EQ(connectError(bed, 0, 1, listener1, 1000ms), "connect() timed out");

  bed.heal(1);
  const auto healed = Clock::now();
  const Arrival late_up = receiveFor(cut.server.get(), 2, 10s);
  const Arrival late_down = receiveFor(cut.client.get(), 4, 10s);
  EXPECT_EQ(late_up.bytes, "up") << "the same connection delivers after heal (closed " << late_up.closed << ", error "
                                 << errnoString(late_up.error) << ")";
  EXPECT_EQ(late_down.bytes, "down") << "closed " << late_down.closed << ", error " << errnoString(late_down.error);
  std::printf("delivered %.2f s after heal (TCP's retransmission back-off)\n",
              std::chrono::duration<double>(Clock::now() - healed).count());
  EXPECT_EQ(connectError(bed, 1, 0, listener0, 2000ms), "");
  bed.heal(1);  // again: a no-op
}

TEST_F(NetnsBedTest, LinkDownCutsTheNodeOffUntilLinkUp) {
  NetnsBed bed(2);
  Connection c = connectNodes(bed, 1, 0);
  const FileDescriptor listener0 = listenIn(bed, 0);
  const FileDescriptor listener1 = listenIn(bed, 1);
  const std::vector<std::string> carrier{"cat", "/sys/class/net/eth0/carrier"};
  EXPECT_EQ(bed.run(1, carrier).output, "1\n");

  bed.linkDown(1);
  EXPECT_EQ(bed.run(1, carrier).output, "0\n") << "node 1 sees its cable unplugged";
  EXPECT_EQ(bed.run(0, carrier).output, "1\n");
  EXPECT_EQ(connectError(bed, 1, 0, listener0, 1000ms), "connect() timed out");
  EXPECT_EQ(connectError(bed, 0, 1, listener1, 1000ms), "connect() timed out");
  sendText(c.client.get(), "up");
  const Arrival stalled = receiveFor(c.server.get(), 2, 500ms);
  EXPECT_EQ(stalled.bytes, "");
  EXPECT_FALSE(stalled.closed);
  EXPECT_EQ(pendingError(c.client.get()), 0);

  bed.linkUp(1);
  EXPECT_EQ(bed.run(1, carrier).output, "1\n");
  EXPECT_EQ(connectError(bed, 1, 0, listener0, 2000ms), "");
  EXPECT_EQ(connectError(bed, 0, 1, listener1, 2000ms), "");
  EXPECT_EQ(receiveFor(c.server.get(), 2, 10s).bytes, "up") << "the connection survives the pulled cable";
}

TEST_F(NetnsBedTest, KillIsACrashPowerOffIsALostMachine) {
  NetnsBed bed(2);
  TempDir dir("netns-bed-test");

  auto crashing = bed.start(1, {testPython(), "-c", kEchoServer, bed.address(1), "29500"}, {}, dir / "crashing.log");
  FileDescriptor to_crashing = connectToProgram(bed, 0, 1, 29500);
  sendText(to_crashing.get(), "a");
  ASSERT_EQ(receiveFor(to_crashing.get(), 1, 5s).bytes, "a") << crashing->log();
  bed.kill(1);
  EXPECT_TRUE(bed.processesIn(1).empty());
  EXPECT_FALSE(crashing->running());
  const Arrival after_crash = receiveFor(to_crashing.get(), 1, 2s);
  EXPECT_TRUE(after_crash.closed || after_crash.error == ECONNRESET)
      << "the crashed server's kernel closes its connection at once";

  auto lost = bed.start(1, {testPython(), "-c", kEchoServer, bed.address(1), "29501"}, {}, dir / "lost.log");
  FileDescriptor to_lost = connectToProgram(bed, 0, 1, 29501);
  sendText(to_lost.get(), "b");
  ASSERT_EQ(receiveFor(to_lost.get(), 1, 5s).bytes, "b") << lost->log();
  bed.powerOff(1);
  EXPECT_TRUE(bed.processesIn(1).empty());
  EXPECT_FALSE(lost->running());
  sendText(to_lost.get(), "anyone?");
  const Arrival silence = receiveFor(to_lost.get(), 1, 1500ms);
  EXPECT_EQ(silence.bytes, "");
  EXPECT_FALSE(silence.closed) << "a lost machine sends no FIN";
  EXPECT_EQ(silence.error, 0) << errnoString(silence.error);
  EXPECT_EQ(pendingError(to_lost.get()), 0);

  bed.heal(1);
  const Arrival rebooted = receiveFor(to_lost.get(), 1, 10s);
  EXPECT_TRUE(rebooted.closed || rebooted.error == ECONNRESET)
      << "once back, the node ends the old connection (bytes '" << rebooted.bytes << "', error "
      << errnoString(rebooted.error) << ")";
}

TEST_F(NetnsBedTest, TeardownRemovesTheBedAndItsProcessesEvenWhenTheTestThrows) {
  TempDir dir("netns-bed-test");
  const std::string grandchild_file = dir / "grandchild.pid";
  std::vector<std::string> names;
  std::string bridge_check;
  std::unique_ptr<BackgroundProcess> stubborn;
  pid_t grandchild = -1;
  Clock::time_point thrown;
  try {
    NetnsBed bed(2, 300ms);
    names = bed.namespaceNames();
    bridge_check = "ip -n " + names.back() + " link show br0";
    const CommandResult bridge = runCommand(bridge_check, 10);
    EXPECT_EQ(bridge.exit_code, 0) << bridge.output;
    const CommandResult ports = runCommand("ip -n " + names.back() + " -o link show master br0", 10);
    EXPECT_EQ(splitLines(ports.output).size(), 2u) << ports.output;
    // Ignores SIGTERM, as does a grandchild in a session of its own.
    stubborn = bed.start(1, {"sh", "-c", "trap '' TERM; setsid sleep 600 & echo $! > " + grandchild_file + "; wait"},
                         {}, dir / "stubborn.log");
    for (auto deadline = in(5s); readFile(grandchild_file).empty() && Clock::now() < deadline;) {
      std::this_thread::sleep_for(10ms);
    }
    grandchild = std::atoi(readFile(grandchild_file).c_str());
    ASSERT_GT(grandchild, 0) << stubborn->log();
    EXPECT_TRUE(processAlive(grandchild));
    EXPECT_EQ(bed.processesIn(1).size(), 2u);
    thrown = Clock::now();
    throw std::runtime_error("the test body failed");
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "the test body failed");
  }
  EXPECT_GE(Clock::now() - thrown, 300ms) << "SIGTERM first, SIGKILL after the grace";
  EXPECT_FALSE(stubborn->running());
  EXPECT_FALSE(processAlive(grandchild));
  const CommandResult listed = runCommand("ip netns list; ls /run/netns", 10);
  const CommandResult links = runCommand("ip -o link show", 10);
  for (const auto& name : names) {
    EXPECT_FALSE(contains(listed.output, name)) << listed.output;
    // A veth end left in the root namespace would name its peer's namespace.
    EXPECT_FALSE(contains(links.output, name)) << links.output;
  }
  EXPECT_NE(runCommand(bridge_check, 10).exit_code, 0) << "the switch with its bridge and ports is gone";
}

TEST_F(NetnsBedTest, ALaterBedRemovesTheBedOfACrashedRun) {
  ForkedChild crashed([](const ChildSide& side) {
    NetnsBed bed(2);
    auto sleeper = bed.start(0, {"sleep", "600"}, {}, "/dev/null");
    // `ip netns exec` enters the namespace, then execs sleep: report once it
    // has (under load it may not have yet, and a bed that looked for it
    // in the namespace then would not find it).
    const std::string comm = "/proc/" + std::to_string(sleeper->pid()) + "/comm";
    for (auto deadline = in(10s); Clock::now() < deadline; std::this_thread::sleep_for(5ms)) {
      std::ifstream file(comm);
      std::string name;
      if (std::getline(file, name) && name == "sleep") break;
    }
    std::string report = std::to_string(sleeper->pid());
    for (const auto& name : bed.namespaceNames()) report += " " + name;
    side.report(report + "\n");
    side.waitForRelease();  // never: it is killed
    return 0;
  });
  std::string report;
  for (auto deadline = in(10s); !contains(report, "\n") && Clock::now() < deadline;) {
    report += crashed.readReport(in(100ms));
  }
  crashed.kill(SIGKILL);
  crashed.reap();
  std::istringstream words(report);
  pid_t sleeper = -1;
  words >> sleeper;
  std::vector<std::string> names{std::istream_iterator<std::string>(words), {}};
  ASSERT_EQ(names.size(), 3u) << report;
  for (const auto& name : names) ASSERT_TRUE(pathExists("/run/netns/" + name)) << "the crash left " << name;
  ASSERT_TRUE(processAlive(sleeper));

  NetnsBed later(1);
  for (const auto& name : names) EXPECT_FALSE(pathExists("/run/netns/" + name)) << name;
  EXPECT_FALSE(processAlive(sleeper)) << "what ran in the crashed bed is killed";
  EXPECT_TRUE(pathExists("/run/netns/" + later.namespaceName(0)));
}

TEST_F(NetnsBedTest, RefusesNodesOutsideTheBed) {
  EXPECT_TRUE(contains(configErrorOf([] { NetnsBed bed(0); }), "1 to 253 nodes"));
  NetnsBed bed(1);
  EXPECT_TRUE(contains(configErrorOf([&] { bed.partition(1); }), "node 1 is not in this bed of 1 nodes"));
}

TEST(NetnsBedSkipTest, SaysWhyWhenNamespacesAreUnavailable) {
  const char* before = std::getenv("DTRAIN_TEST_NO_NETNS");
  const std::string saved = before ? before : "";
  ::setenv("DTRAIN_TEST_NO_NETNS", "1", 1);
  const std::string reason = NetnsBed::unavailableReason();
  const std::string refusal = configErrorOf([] { NetnsBed bed(2); });
  if (before) {
    ::setenv("DTRAIN_TEST_NO_NETNS", saved.c_str(), 1);
  } else {
    ::unsetenv("DTRAIN_TEST_NO_NETNS");
  }
  EXPECT_TRUE(contains(reason, "DTRAIN_TEST_NO_NETNS is set")) << reason;
  EXPECT_TRUE(contains(refusal, reason)) << refusal;

  // The bed's tests skip with that sentence (this binary, run again).
  const CommandResult run = runCommand("DTRAIN_TEST_NO_NETNS=1 '" + selfExecutablePath() +
                                           "' --gtest_filter='NetnsBedTest.NodesReach*:NetnsBedTest.Partition*'",
                                       60);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "[  SKIPPED ] NetnsBedTest.NodesReachEachOtherByAddressAndKnowTheirNames"))
      << run.output;
  EXPECT_TRUE(contains(run.output, "[  SKIPPED ] NetnsBedTest.PartitionStallsConnectionsWithoutAResetUntilHealed"))
      << run.output;
  EXPECT_TRUE(contains(run.output, reason)) << run.output;
}

}  // namespace
}  // namespace dtrain::testing
