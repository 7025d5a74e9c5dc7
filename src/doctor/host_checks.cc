#include "doctor/host_checks.h"

#include <cstdio>

#include "doctor/host_check_functions.h"
#include "doctor/peer_link.h"

namespace dtrain::doctor {

CheckResult checkPeersReachable(const DoctorContext& ctx) {
  const std::string name = "peers.reachable";
  if (ctx.options.peers.empty()) return skip(name, "no --peers given");
  std::vector<std::string> unreachable;
  std::string detail;
  double slowest = -1;
  std::string slowest_peer;
  for (const std::string& entry : ctx.options.peers) {
    PeerAddress peer = parsePeerAddress(entry, "--peers", false);
    PeerMeasurement m = measurePeer(peer, ctx.options.timeout_seconds);
    char line[256];
    if (!m.reachable) {
      unreachable.push_back(entry + " (" + m.error + ")");
      detail += entry + ": unreachable: " + m.error + "\n";
      continue;
    }
    std::snprintf(line, sizeof(line), "%s: connect %.3f ms, %llu MiB in %.3f s = %.2f Gbit/s\n", entry.c_str(),
                  m.connect_ms, static_cast<unsigned long long>(m.bytes >> 20), m.seconds, m.gbit_per_s);
    detail += line;
    if (slowest < 0 || m.gbit_per_s < slowest) {
      slowest = m.gbit_per_s;
      slowest_peer = entry;
    }
  }
  if (!unreachable.empty()) {
    std::string list;
    for (const std::string& item : unreachable) list += (list.empty() ? "" : ", ") + item;
    return fail(name, std::to_string(unreachable.size()) + " of " + std::to_string(ctx.options.peers.size()) +
                          " peer(s) unreachable: " + list,
                "start `dtrain doctor --serve-peer 0.0.0.0:PORT` on each peer, and check routes and firewalls "
                "between the nodes (`nc -vz HOST PORT`)",
                detail);
  }
  char reason[256];
  std::snprintf(reason, sizeof(reason), "%zu peer(s) reachable; slowest %s at %.2f Gbit/s",
                ctx.options.peers.size(), slowest_peer.c_str(), slowest);
  return pass(name, reason, detail);
}

void addHostChecks(std::vector<CheckSpec>& checks) {
  auto add = [&](std::string name, std::string description, CheckResult (*run)(const DoctorContext&),
                 bool active = false) {
    checks.push_back({std::move(name), std::move(description), active, run});
  };
  add("rdma.ports", "InfiniBand/RoCE ports: state ACTIVE, phys_state LinkUp, rate", checkRdmaPorts);
  add("rdma.gpudirect", "GPUDirect RDMA module (nvidia_peermem or nv_peer_mem) when RDMA devices exist",
      checkGpuDirect);
  add("nccl.socket_ifname", "NCCL_SOCKET_IFNAME matches an interface that is up", checkSocketIfname);
  add("nccl.ib_hca", "NCCL_IB_HCA names RDMA devices and ports that exist", checkIbHca);
  add("nccl.debug_env", "No debugging or slowing NCCL/CUDA variables set", checkDebugEnv);
  add("host.socket_buffers", "Socket buffer limits: net.core.rmem_max/wmem_max and tcp_rmem/tcp_wmem max >= 128 MiB",
      checkSocketBuffers);
  add("host.memlock", "Max locked memory unlimited (RDMA registration)", checkMemlock);
  add("host.shm", "/dev/shm large enough for NCCL's shared-memory transport (>= 1 GiB)", checkShm);
  add("host.selinux", "SELinux not enforcing", checkSelinux);
  add("host.firewall", "No packet filter (iptables, nftables) in the way between nodes", checkFirewall);
  add("host.time_sync", "Kernel clock synchronised (adjtimex: no STA_UNSYNC, max error <= 100 ms)",
      static_cast<CheckResult (*)(const DoctorContext&)>(checkTimeSync));
  add("host.numa", "Each GPU's NUMA node and whether this process may run on its CPUs", checkNuma);
  add("peers.reachable", "TCP to each --peers HOST:PORT (dtrain doctor --serve-peer): latency and bandwidth",
      checkPeersReachable, true);
}

}  // namespace dtrain::doctor
