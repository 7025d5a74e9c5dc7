// Several "machines" on one host for real-process tests of what spans nodes
// (launch agents on different nodes, Gloo between them, a node lost, a
// silent partition that heals): N Linux network namespaces ("nodes") joined
// by a bridge, each with its own IPv4 address, host name and processes, and
// faults injected on a node's link.
//
// A bed, <tag> being "<pid of the owning test process>-<counter>":
//   namespace dtnb-<tag>-sw     the switch: bridge br0 and ports n0..n<N-1>
//   namespace dtnb-<tag>-n<i>   node i: lo, and eth0 (the peer of port n<i>)
//                               with 10.X.Y.(i+1)/24
// The root namespace gets nothing (no link, address or route), so a host
// firewall on bridged traffic (Docker's FORWARD DROP with br_netfilter)
// never sees the bed, and beds of parallel test processes cannot collide
// even if two chose the same 10.X.Y (X.Y come from the pid and the counter).
// Neighbours are static (no ARP), so a partitioned peer is silent like one
// behind a router: a connect times out, never "No route to host".
//
// Needs root, iproute2 (`ip`, `tc` with the tbf qdisc) and util-linux
// (`unshare`, `mount`). Tests ask first:
//
//   const std::string reason = NetnsBed::unavailableReason();
//   if (!reason.empty()) GTEST_SKIP() << reason;
//
// DTRAIN_TEST_NO_NETNS=1 in the environment makes unavailableReason() say
// so (to see the skip path on a machine that has namespaces).
//
// Not thread-safe: one thread drives a bed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/background_process.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"

namespace dtrain::testing {

class NetnsBed {
 public:
  // "" when this machine can build a bed (checked once per process by
  // building and deleting a throw-away one), else a sentence saying why
  // (DTRAIN_TEST_NO_NETNS set, not root, a tool missing, the kernel's
  // refusal as `ip` or `tc` reported it).
  static std::string unavailableReason();

  // Builds a bed of `nodes` (1..253) nodes, first deleting the beds of test
  // processes that no longer exist (killing whatever still runs in them).
  // `stop_grace`: how long processes in a node get between SIGTERM and
  // SIGKILL when the bed is destroyed. ConfigError (with the reason) when
  // unavailableReason() is not empty or `nodes` is out of range; IoError
  // naming the `ip` command and its output when a step fails (what was
  // built is deleted again).
  explicit NetnsBed(int nodes, std::chrono::milliseconds stop_grace = std::chrono::seconds(5));
  // Every process in every node gets SIGTERM, SIGKILL after stop_grace,
  // then the namespaces are deleted (the bridge and veths go with them).
  ~NetnsBed();
  NetnsBed(const NetnsBed&) = delete;
  NetnsBed& operator=(const NetnsBed&) = delete;

  int size() const { return nodes_; }
  // "10.77.3.2" for node 1.
  std::string address(int node) const;
  // "node1": the host name of what start() and run() start there; every
  // node's name resolves (through /etc/hosts) to its address in every node.
  std::string hostname(int node) const;
  // The node's namespace, for a test's own `ip netns exec`.
  std::string namespaceName(int node) const;
  // Every namespace of the bed, the switch's last (to check teardown).
  std::vector<std::string> namespaceNames() const;

  // argv wrapped so that it runs in the node: its network namespace, its own
  // UTS namespace with hostname(node), and the bed's /etc/hosts (bind-mounted
  // in the mount namespace `ip netns exec` makes). Same pid as the wrapper:
  // signals reach argv[0]'s program.
  std::vector<std::string> commandIn(int node, const std::vector<std::string>& argv) const;
  // A program running in the node, as BackgroundProcess runs one (argv[0]
  // a path or a name on PATH; `env` added to this process's environment).
  std::unique_ptr<BackgroundProcess> start(int node, const std::vector<std::string>& argv,
                                           const std::map<std::string, std::string>& env, const std::string& log_path);
  // A short command run to its end in the node (as runCommand: 124 when
  // `time_limit_s` killed it).
  CommandResult run(int node, const std::vector<std::string>& argv, int time_limit_s = 30);

  // Runs f() on the calling thread inside the node's network namespace and
  // returns what it returns; sockets it creates belong to the node and keep
  // working once the thread is back in its own namespace. For in-process
  // servers and clients (host names do not resolve here: use address()).
  template <typename F>
  auto inNode(int node, F&& f) {
    ThreadInNamespace entered(namespacePath(node));
    return f();
  }

  // Faults on a node's link; each is undone by its pair, and is a no-op when
  // already in effect.
  //
  // Every packet to and from the node vanishes while both ends of its veth
  // stay up: a tbf qdisc of 1 kbit with a 1-byte burst and queue on each end
  // drops every frame (the kernel here has neither matchall nor gact).
  // Established connections stall with no error or reset and deliver again
  // after heal(); new connects time out.
  void partition(int node);
  void heal(int node);
  // The node's switch port goes down: the node's eth0 shows NO-CARRIER, as
  // with an unplugged cable, keeping its address and routes; nothing passes
  // either way until linkUp().
  void linkDown(int node);
  void linkUp(int node);
  // SIGKILL to every process in the node (whoever started it; zombies
  // excluded); returns once none is left. Their kernel still closes their
  // sockets, so peers see FIN or RST at once: processes crashed on a live
  // machine.
  void kill(int node);
  // The machine is gone: partition(node), then kill(node). Peers hear
  // nothing at all (no FIN, no RST). heal() brings it back "rebooted", with
  // no processes; unlike a real reboot its kernel still holds the killed
  // processes' closing connections, so a peer then sees its old connection
  // closed or reset.
  void powerOff(int node);
  // The pids of the live processes in the node.
  std::vector<pid_t> processesIn(int node) const;

 private:
  // Switches the calling thread's network namespace for its lifetime.
  class ThreadInNamespace {
   public:
    explicit ThreadInNamespace(const std::string& namespace_path);
    ~ThreadInNamespace();
    ThreadInNamespace(const ThreadInNamespace&) = delete;
    ThreadInNamespace& operator=(const ThreadInNamespace&) = delete;

   private:
    int home_fd_ = -1;
  };

  std::string namespacePath(int node) const;
  std::string switchNamespace() const;
  void build();
  void destroy() noexcept;
  void checkNode(int node) const;

  int nodes_;
  std::chrono::milliseconds stop_grace_;
  std::string tag_;  // "<pid>-<counter>"
  int subnet_ = 0;   // X * 256 + Y of 10.X.Y.0/24
  TempDir files_;    // batch files for `ip`, the bed's hosts file, command output
  std::vector<bool> partitioned_;
};

}  // namespace dtrain::testing
