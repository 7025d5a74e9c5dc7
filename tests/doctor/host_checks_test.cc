// The host, RDMA and NCCL-environment checks, each called on a fixture tree.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/system_root.h"
#include "doctor/host_check_functions.h"
#include "fixture_tree.h"
#include "gpu/nvml.h"
#include "tests/support/text.h"

namespace dtrain::doctor {
namespace {

using testing::FixtureTree;

// A fixture tree plus the context the checks read it through.
class Node {
 public:
  Node() { tree.writeGoodNode(); }
  CheckResult run(CheckResult (*check)(const DoctorContext&)) {
    SystemRoot root(tree.root());
    DoctorContext ctx{root, env, options, nvml, nvml_error};
    return check(ctx);
  }
  CheckResult runTimeSync(const KernelClockProbe& probe) {
    SystemRoot root(tree.root());
    DoctorContext ctx{root, env, options, nvml, nvml_error};
    return checkTimeSync(ctx, probe);
  }

  FixtureTree tree;
  std::map<std::string, std::string> env;
  DoctorOptions options;
  gpu::Nvml* nvml = nullptr;
  std::string nvml_error = "NVML not available: test";
};

using testing::contains;

#define EXPECT_STATUS(result, expected)                                                             \
  EXPECT_EQ(statusName((result).status), std::string(statusName(expected)))                         \
      << (result).name << ": " << (result).reason << " | hint: " << (result).hint << "\n" << (result).detail

TEST(HostChecks, GoodNodePassesEveryCheck) {
  Node node;
  for (auto check : {checkSocketBuffers, checkMemlock, checkShm, checkSelinux, checkFirewall, checkRdmaPorts,
                     checkGpuDirect, checkSocketIfname, checkIbHca, checkDebugEnv}) {
    CheckResult result = node.run(check);
    EXPECT_STATUS(result, Status::kPass);
    EXPECT_TRUE(result.hint.empty()) << result.name;
    EXPECT_FALSE(result.reason.empty()) << result.name;
  }
}

TEST(HostChecks, SocketBuffersBelow128MiBWarnWithTheSysctlThatFixesThem) {
  Node node;
  node.tree.write("/proc/sys/net/core/rmem_max", "212992\n");
  node.tree.write("/proc/sys/net/ipv4/tcp_wmem", "4096\t16384\t4194304\n");
  CheckResult result = node.run(checkSocketBuffers);
  EXPECT_STATUS(result, Status::kWarn);
  EXPECT_TRUE(contains(result.reason, "net.core.rmem_max 212992")) << result.reason;
  EXPECT_TRUE(contains(result.reason, "net.ipv4.tcp_wmem max 4194304")) << result.reason;
  EXPECT_FALSE(contains(result.reason, "wmem_max")) << result.reason;
  EXPECT_TRUE(contains(result.hint, "sysctl -w net.core.rmem_max=134217728")) << result.hint;
  EXPECT_TRUE(contains(result.hint, "'net.ipv4.tcp_wmem=4096 16384 134217728'")) << result.hint;
}

TEST(HostChecks, SocketBuffersUnreadableSkipNamingTheFile) {
  Node node;
  node.tree.remove("/proc/sys/net/core/wmem_max");
  CheckResult result = node.run(checkSocketBuffers);
  EXPECT_STATUS(result, Status::kSkip);
  EXPECT_TRUE(contains(result.reason, node.tree.path("/proc/sys/net/core/wmem_max"))) << result.reason;
}

TEST(HostChecks, AFileThatIsADirectoryIsUnreadableNotACrash) {
  Node node;
  node.tree.remove("/proc/sys/net/core/rmem_max");
  node.tree.makeDirectory("/proc/sys/net/core/rmem_max");
  node.tree.remove("/proc/self/limits");
  node.tree.makeDirectory("/proc/self/limits");
  node.tree.remove("/proc/mounts");
  node.tree.makeDirectory("/proc/mounts");
  EXPECT_STATUS(node.run(checkSocketBuffers), Status::kSkip);
  EXPECT_STATUS(node.run(checkMemlock), Status::kSkip);
  CheckResult shm = node.run(checkShm);
  EXPECT_TRUE(shm.status == Status::kSkip || shm.status == Status::kWarn) << shm.reason;
}

TEST(HostChecks, MemlockLimitedWithoutRdmaWarns) {
  Node node;
  node.tree.remove("/sys/class/infiniband");
  node.tree.writeMemlock("8388608", "8388608");
  CheckResult result = node.run(checkMemlock);
  EXPECT_STATUS(result, Status::kWarn);
  EXPECT_TRUE(contains(result.reason, "8388608 bytes")) << result.reason;
  EXPECT_TRUE(contains(result.hint, "ulimit -l unlimited")) << result.hint;
  EXPECT_TRUE(contains(result.hint, "LimitMEMLOCK")) << result.hint;
}

TEST(HostChecks, MemlockLimitedWithRdmaFails) {
  Node node;
  node.tree.writeMemlock("65536", "unlimited");
  CheckResult result = node.run(checkMemlock);
  EXPECT_STATUS(result, Status::kFail);
  EXPECT_TRUE(contains(result.reason, "65536 bytes")) << result.reason;
  EXPECT_TRUE(contains(result.reason, "1 RDMA device")) << result.reason;
  EXPECT_TRUE(contains(result.hint, "PropagateResourceLimits")) << result.hint;
}

TEST(HostChecks, MemlockWithoutTheLimitLineSkips) {
  Node node;
  node.tree.write("/proc/self/limits", "Limit Soft Limit Hard Limit Units\n");
  EXPECT_STATUS(node.run(checkMemlock), Status::kSkip);
}

TEST(HostChecks, ShmSizeThresholds) {
  struct Case {
    const char* size;
    Status expected;
    const char* shown;
  } cases[] = {
      {"size=65536k", Status::kFail, "64 MiB"},   // Docker's default
      {"size=32m", Status::kFail, "32 MiB"},
      {"size=512m", Status::kWarn, "512 MiB"},
      {"size=1g", Status::kPass, "1 GiB"},
      {"size=17179869184", Status::kPass, "16 GiB"},
  };
  for (const Case& c : cases) {
    Node node;
    node.tree.write("/proc/mounts", std::string("shm /dev/shm tmpfs rw,nosuid,nodev,noexec,") + c.size + " 0 0\n");
    CheckResult result = node.run(checkShm);
    EXPECT_STATUS(result, c.expected);
    EXPECT_TRUE(contains(result.reason, c.shown)) << c.size << ": " << result.reason;
    if (c.expected != Status::kPass) {
      EXPECT_TRUE(contains(result.hint, "--shm-size")) << result.hint;
    }
  }
}

TEST(HostChecks, ShmWithoutSizeOptionAsksStatvfs) {
  Node node;
  node.tree.makeDirectory("/dev/shm");
  node.tree.write("/proc/mounts", "tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\n");
  CheckResult result = node.run(checkShm);
  EXPECT_NE(result.status, Status::kSkip) << result.reason;
  EXPECT_TRUE(contains(result.reason, "(statvfs)")) << result.reason;
}

TEST(HostChecks, ShmNotMountedWarns) {
  Node node;
  node.tree.write("/proc/mounts", "proc /proc proc rw 0 0\n");
  CheckResult result = node.run(checkShm);
  EXPECT_STATUS(result, Status::kWarn);
  EXPECT_TRUE(contains(result.reason, "not mounted")) << result.reason;
}

TEST(HostChecks, SelinuxModes) {
  Node node;
  node.tree.write("/sys/fs/selinux/enforce", "1\n");
  CheckResult enforcing = node.run(checkSelinux);
  EXPECT_STATUS(enforcing, Status::kWarn);
  EXPECT_TRUE(contains(enforcing.reason, "enforcing")) << enforcing.reason;
  EXPECT_FALSE(enforcing.hint.empty());
  node.tree.write("/sys/fs/selinux/enforce", "0\n");
  CheckResult permissive = node.run(checkSelinux);
  EXPECT_STATUS(permissive, Status::kPass);
  EXPECT_TRUE(contains(permissive.reason, "permissive")) << permissive.reason;
  node.tree.remove("/sys/fs/selinux");
  EXPECT_TRUE(contains(node.run(checkSelinux).reason, "not enabled"));
}

TEST(HostChecks, FirewallTablesOrNftablesWarn) {
  Node iptables;
  iptables.tree.write("/proc/net/ip_tables_names", "filter\nnat\n");
  CheckResult result = iptables.run(checkFirewall);
  EXPECT_STATUS(result, Status::kWarn);
  EXPECT_TRUE(contains(result.reason, "packet filter active (iptables: filter nat)")) << result.reason;
  EXPECT_TRUE(contains(result.hint, "29500")) << result.hint;

  Node nft;
  nft.tree.write("/proc/modules", "nf_tables 364544 3 nft_chain_nat, Live 0x0\n");
  CheckResult nft_result = nft.run(checkFirewall);
  EXPECT_STATUS(nft_result, Status::kWarn);
  EXPECT_TRUE(contains(nft_result.reason, "nf_tables")) << nft_result.reason;
}

// What the kernel's clock says (adjtimex, through the injected probe) and
// what host.time_sync makes of it.
struct TimeSyncCase {
  KernelClockState clock;
  Status expected;
  const char* in_reason;
  const char* in_hint;
};
const TimeSyncCase kTimeSyncCases[] = {
    {{false, 12000, 350}, Status::kPass, "estimated error 350 us", ""},
    {{true, 16000000, 16000000}, Status::kWarn, "not synchronised", "chrony"},
    {{false, 250000, 1000}, Status::kWarn, "250 ms", ""},
};

TEST(HostChecks, TimeSyncThroughTheInjectedProbe) {
  Node node;
  for (const TimeSyncCase& c : kTimeSyncCases) {
    SCOPED_TRACE(c.in_reason);
    CheckResult result = node.runTimeSync([&] { return c.clock; });
    EXPECT_STATUS(result, c.expected);
    EXPECT_TRUE(contains(result.reason, c.in_reason)) << result.reason;
    EXPECT_TRUE(contains(result.hint, c.in_hint)) << result.hint;
  }
}

TEST(HostChecks, TimeSyncOnAFixtureRootSkips) {
  Node node;
  CheckResult result = node.run(checkTimeSync);
  EXPECT_STATUS(result, Status::kSkip);
  EXPECT_TRUE(contains(result.reason, "fixture")) << result.reason;
}

TEST(HostChecks, TimeSyncReadsTheLiveKernel) {
  KernelClockState clock = readKernelClock();  // must not throw without privileges
  EXPECT_GE(clock.max_error_us, 0);
}

TEST(HostChecks, RdmaPortDownWarnsAndAllDownFails) {
  Node node;
  node.tree.writeRdmaPort("mlx5_1", 1, "1: DOWN", "2: Polling");
  CheckResult some = node.run(checkRdmaPorts);
  EXPECT_STATUS(some, Status::kWarn);
  EXPECT_TRUE(contains(some.reason, "1 of 2 RDMA ports down: mlx5_1/1 DOWN (Polling)")) << some.reason;
  EXPECT_TRUE(contains(some.detail, "mlx5_0/1 ACTIVE 400 Gb/sec (4X NDR)")) << some.detail;
  EXPECT_TRUE(contains(some.detail, "mlx5_1/1 DOWN")) << some.detail;

  node.tree.writeRdmaPort("mlx5_0", 1, "2: INIT", "5: LinkUp");
  CheckResult none = node.run(checkRdmaPorts);
  EXPECT_STATUS(none, Status::kFail);
  EXPECT_TRUE(contains(none.reason, "no RDMA port is active")) << none.reason;
  EXPECT_TRUE(contains(none.reason, "mlx5_0/1 INIT (LinkUp)")) << none.reason;
}

TEST(HostChecks, RdmaPortsPassListsEachPort) {
  Node node;
  CheckResult result = node.run(checkRdmaPorts);
  EXPECT_STATUS(result, Status::kPass);
  EXPECT_TRUE(contains(result.reason, "mlx5_0/1 ACTIVE 400 Gb/sec (4X NDR)")) << result.reason;
}

TEST(HostChecks, WithoutRdmaDevicesTheRdmaChecksSkip) {
  Node node;
  node.tree.remove("/sys/class/infiniband");
  node.tree.remove("/sys/module/nvidia_peermem");
  CheckResult ports = node.run(checkRdmaPorts);
  EXPECT_STATUS(ports, Status::kSkip);
  EXPECT_EQ(ports.reason, "no RDMA devices: NCCL uses TCP sockets");
  EXPECT_STATUS(node.run(checkGpuDirect), Status::kSkip);
  EXPECT_STATUS(node.run(checkIbHca), Status::kSkip);
}

TEST(HostChecks, GpuDirectModuleMissingWarns) {
  Node node;
  node.tree.remove("/sys/module/nvidia_peermem");
  CheckResult result = node.run(checkGpuDirect);
  EXPECT_STATUS(result, Status::kWarn);
  EXPECT_TRUE(contains(result.hint, "modprobe nvidia_peermem")) << result.hint;
  node.tree.makeDirectory("/sys/module/nv_peer_mem");
  EXPECT_STATUS(node.run(checkGpuDirect), Status::kPass);
}

// NCCL_SOCKET_IFNAME and NCCL_IB_HCA values (NCCL's prefix, '=' exact and
// '^' exclusion syntax) against the good node: eth0, ib0 and lo up, docker0
// down; RDMA device mlx5_0 with port 1.
struct NcclVariableCase {
  const char* variable;
  const char* value;
  Status expected;
  std::vector<std::string> in_reason;
  std::vector<std::string> in_hint;
};
const NcclVariableCase kNcclVariableCases[] = {
    {"NCCL_SOCKET_IFNAME", "docker,ens", Status::kFail,
     {"docker, ens match no interface that is up", "up: eth0, ib0, lo"}, {}},
    {"NCCL_SOCKET_IFNAME", "eth", Status::kPass, {"eth -> eth0"}, {}},
    {"NCCL_SOCKET_IFNAME", "=eth0", Status::kPass, {}, {}},
    {"NCCL_SOCKET_IFNAME", "=eth", Status::kFail, {}, {}},     // exact: no interface is called "eth"
    {"NCCL_SOCKET_IFNAME", "docker0", Status::kFail, {}, {}},  // exists but down
    {"NCCL_SOCKET_IFNAME", "^docker,lo", Status::kPass, {"leaves eth0, ib0"}, {}},
    {"NCCL_SOCKET_IFNAME", "^eth,ib,lo", Status::kFail, {"excludes every interface that is up"}, {}},
    {"NCCL_SOCKET_IFNAME", "eth0,,ib0", Status::kFail, {"empty item 2"}, {}},
    {"NCCL_IB_HCA", "mlx5_0,mlx5_7", Status::kFail, {"no such RDMA device or port: mlx5_7"}, {"mlx5_0"}},
    {"NCCL_IB_HCA", "=mlx5_0:2", Status::kFail, {"mlx5_0:2"}, {}},
    {"NCCL_IB_HCA", "=mlx5_0:1", Status::kPass, {}, {}},
    {"NCCL_IB_HCA", "mlx5", Status::kPass, {}, {}},  // prefix
    {"NCCL_IB_HCA", "^mlx5", Status::kFail, {}, {}},
    {"NCCL_IB_HCA", "mlx5_0:x", Status::kFail, {"port 'x'"}, {}},
};

TEST(HostChecks, NcclInterfaceAndHcaSelections) {
  for (const NcclVariableCase& c : kNcclVariableCases) {
    SCOPED_TRACE(std::string(c.variable) + "=" + c.value);
    Node node;
    node.env[c.variable] = c.value;
    CheckResult result = node.run(std::string(c.variable) == "NCCL_IB_HCA" ? checkIbHca : checkSocketIfname);
    EXPECT_STATUS(result, c.expected);
    for (const std::string& part : c.in_reason) EXPECT_TRUE(contains(result.reason, part)) << result.reason;
    for (const std::string& part : c.in_hint) EXPECT_TRUE(contains(result.hint, part)) << result.hint;
  }
}

TEST(HostChecks, DebugEnvironmentWarnsNamingEachVariable) {
  Node node;
  node.env = {{"NCCL_DEBUG", "info"},        {"NCCL_DEBUG_SUBSYS", "INIT,NET"},
              {"NCCL_P2P_DISABLE", "1"},     {"NCCL_SHM_DISABLE", "1"},
              {"NCCL_IB_DISABLE", "1"},      {"NCCL_CHECKS_DISABLE", "1"},
              {"CUDA_LAUNCH_BLOCKING", "1"}, {"NCCL_BLOCKING_WAIT", "1"}};
  CheckResult result = node.run(checkDebugEnv);
  EXPECT_STATUS(result, Status::kWarn);
  for (const char* variable : {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
                               "NCCL_IB_DISABLE", "NCCL_CHECKS_DISABLE", "CUDA_LAUNCH_BLOCKING",
                               "NCCL_BLOCKING_WAIT"}) {
    EXPECT_TRUE(contains(result.reason, variable)) << variable << ": " << result.reason;
    EXPECT_TRUE(contains(result.detail, std::string(variable) + "=")) << variable << ": " << result.detail;
  }
  EXPECT_TRUE(contains(result.hint, "unset NCCL_DEBUG")) << result.hint;
}

TEST(HostChecks, DebugEnvironmentHarmlessValuesPass) {
  Node node;
  node.env = {{"NCCL_DEBUG", "WARN"}, {"NCCL_P2P_DISABLE", "0"}, {"CUDA_LAUNCH_BLOCKING", "0"}};
  EXPECT_STATUS(node.run(checkDebugEnv), Status::kPass);
  node.tree.remove("/sys/class/infiniband");  // without RDMA, NCCL_IB_DISABLE=1 costs nothing
  node.env = {{"NCCL_IB_DISABLE", "1"}};
  EXPECT_STATUS(node.run(checkDebugEnv), Status::kPass);
}

TEST(HostChecks, NumaWithoutNvmlSkips) {
  Node node;
  CheckResult result = node.run(checkNuma);
  EXPECT_STATUS(result, Status::kSkip);
  EXPECT_TRUE(contains(result.reason, "NVML not available")) << result.reason;
}

// host.numa against the fake NVML's two GPUs (PCI 00000000:19:00.0 and
// 00000000:3B:00.0).
class NumaCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("DTRAIN_NVML_LIBRARY", DTRAIN_FAKE_NVML, 1);
    nvml_ = gpu::Nvml::open();
    node_.nvml = nvml_.get();
  }
  void TearDown() override { ::unsetenv("DTRAIN_NVML_LIBRARY"); }
  Node node_;
  std::unique_ptr<gpu::Nvml> nvml_;
};

TEST_F(NumaCheck, ListsEachGpusNode) {
  CheckResult result = node_.run(checkNuma);
  EXPECT_STATUS(result, Status::kPass);
  EXPECT_TRUE(contains(result.reason, "GPU0->node0, GPU1->node1")) << result.reason;
  EXPECT_TRUE(contains(result.detail, "0000:3b:00.0: numa_node 1, local CPUs 8-15")) << result.detail;
}

TEST_F(NumaCheck, NoNodeOnAMultiNodeMachineWarns) {
  node_.tree.write("/sys/bus/pci/devices/0000:3b:00.0/numa_node", "-1\n");
  CheckResult result = node_.run(checkNuma);
  EXPECT_STATUS(result, Status::kWarn);
  EXPECT_TRUE(contains(result.reason, "GPU1 has no NUMA node")) << result.reason;
}

TEST_F(NumaCheck, CpusOutsideTheGpusNodeWarn) {
  node_.tree.write("/proc/self/status", "Name:\tdtrain\nCpus_allowed_list:\t0-3\n");
  CheckResult result = node_.run(checkNuma);
  EXPECT_STATUS(result, Status::kWarn);
  EXPECT_TRUE(contains(result.reason, "GPU1's local CPUs 8-15 are outside this process's CPUs")) << result.reason;
  EXPECT_FALSE(contains(result.reason, "GPU0's")) << result.reason;
}

TEST(HostChecks, CpuListParsing) {
  EXPECT_EQ(parseCpuList("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parseCpuList(""), std::vector<int>{});
  EXPECT_FALSE(parseCpuList("3-1"));
  EXPECT_FALSE(parseCpuList("a-b"));
  EXPECT_FALSE(parseCpuList("1,,2"));
}

}  // namespace
}  // namespace dtrain::doctor
