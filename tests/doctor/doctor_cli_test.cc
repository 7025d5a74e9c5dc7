// `dtrain doctor` as a real process: fixture trees through --root, the exit
// codes, --json, --list, bad input, and the peer test between two dtrain
// processes on loopback.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/command.h"
#include "tests/support/background_process.h"
#include "tests/support/temp_dir.h"
#include "fixture_tree.h"
#include "tests/support/text.h"

namespace dtrain::testing {
namespace {

using testing::contains;

// `dtrain doctor ARGS` in a clean environment (no NCCL_* from the caller),
// with NVML out of the way; `env` is prepended as VAR=value words.
CommandResult doctor(const std::string& args, const std::string& env = "", int time_limit_s = 60) {
  return runCommand("env -i PATH=/usr/bin:/bin DTRAIN_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 " + env + " " +
                        dtrainBin() + " doctor " + args,
                    time_limit_s);
}

// The JSON document of an output that may carry log lines before it.
nlohmann::json jsonOf(const std::string& output) {
  size_t start = output.find("{\n");
  if (start == std::string::npos) throw std::runtime_error("no JSON in: " + output);
  return nlohmann::json::parse(output.substr(start));
}

const nlohmann::json* findCheck(const nlohmann::json& doc, const std::string& name) {
  for (const auto& check : doc["checks"]) {
    if (check["name"] == name) return &check;
  }
  return nullptr;
}

const std::string kHostChecks = "--check host,rdma,nccl";

TEST(DoctorCli, GoodNodeJsonFollowsTheSchemaAndExitsZero) {
  FixtureTree tree;
  tree.writeGoodNode();
  CommandResult r = doctor("--root " + tree.root() + " " + kHostChecks + " --json --strict");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json doc = jsonOf(r.output);
  EXPECT_TRUE(doc["host"].is_string() && !doc["host"].get<std::string>().empty());
  EXPECT_EQ(doc["root"], tree.root());
  EXPECT_EQ(doc["exit_code"], 0);
  ASSERT_TRUE(doc["checks"].is_array());
  int pass = 0, skip = 0;
  for (const auto& check : doc["checks"]) {
    for (const char* key : {"name", "status", "reason", "hint", "detail"}) {
      EXPECT_TRUE(check.contains(key) && check[key].is_string()) << key << " in " << check.dump();
    }
    std::string group = check["name"].get<std::string>().substr(0, check["name"].get<std::string>().find('.'));
    EXPECT_TRUE(group == "host" || group == "rdma" || group == "nccl") << check.dump();
    std::string status = check["status"];
    EXPECT_TRUE(status == "PASS" || status == "SKIP") << check.dump();
    pass += status == "PASS";
    skip += status == "SKIP";
  }
  EXPECT_EQ(doc["summary"]["pass"], pass);
  EXPECT_EQ(doc["summary"]["skip"], skip);
  EXPECT_EQ(doc["summary"]["warn"], 0);
  EXPECT_EQ(doc["summary"]["fail"], 0);
  EXPECT_EQ((*findCheck(doc, "host.time_sync"))["status"], "SKIP");  // not this kernel's tree
  EXPECT_EQ((*findCheck(doc, "host.numa"))["status"], "SKIP");       // no NVML
  EXPECT_EQ(findCheck(doc, "peers.reachable"), nullptr);              // active: needs --peers
  EXPECT_EQ(findCheck(doc, "gpu.count"), nullptr);
}

TEST(DoctorCli, TableOutput) {
  FixtureTree tree;
  tree.writeGoodNode();
  tree.write("/sys/fs/selinux/enforce", "1\n");
  CommandResult r = doctor("--root " + tree.root() + " " + kHostChecks);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "dtrain doctor: ")) << r.output;
  EXPECT_TRUE(contains(r.output, "(root " + tree.root() + ")")) << r.output;
  EXPECT_TRUE(contains(r.output, "CHECK ")) << r.output;
  EXPECT_TRUE(contains(r.output, "host.selinux")) << r.output;
  EXPECT_TRUE(contains(r.output, "hint: ")) << r.output;
  EXPECT_TRUE(contains(r.output, " passed, 1 warning, 0 failed, ")) << r.output;
  EXPECT_FALSE(contains(r.output, "\033[")) << "no colours when not on a terminal";
}

TEST(DoctorCli, WarningsExitZeroAndOneWithStrict) {
  FixtureTree tree;
  tree.writeGoodNode();
  tree.write("/proc/sys/net/core/rmem_max", "212992\n");
  CommandResult relaxed = doctor("--root " + tree.root() + " " + kHostChecks + " --json");
  EXPECT_EQ(relaxed.exit_code, 0) << relaxed.output;
  nlohmann::json doc = jsonOf(relaxed.output);
  EXPECT_EQ((*findCheck(doc, "host.socket_buffers"))["status"], "WARN");
  EXPECT_EQ(doc["exit_code"], 0);

  CommandResult strict = doctor("--root " + tree.root() + " " + kHostChecks + " --json --strict");
  EXPECT_EQ(strict.exit_code, 1) << strict.output;
  EXPECT_EQ(jsonOf(strict.output)["exit_code"], 1);
}

TEST(DoctorCli, AFailureExitsTwo) {
  FixtureTree tree;
  tree.writeGoodNode();
  tree.writeRdmaPort("mlx5_0", 1, "1: DOWN", "3: Disabled");
  CommandResult r = doctor("--root " + tree.root() + " " + kHostChecks + " --json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  nlohmann::json doc = jsonOf(r.output);
  EXPECT_EQ((*findCheck(doc, "rdma.ports"))["status"], "FAIL");
  EXPECT_EQ(doc["exit_code"], 2);
  EXPECT_EQ(doc["summary"]["fail"], 1);
}

// A node whose GPUs sit on the PCI bus while the driver or NVML is broken
// fails without --expect-gpus, naming the GPUs' addresses, so a Slurm
// health check drains it; NVIDIA's audio function of the same card and
// another vendor's display controller count for nothing.
TEST(DoctorCli, GpusOnThePciBusWithoutNvmlFail) {
  FixtureTree tree;
  tree.writeGoodNode();
  auto pciDevice = [&tree](const std::string& address, const std::string& vendor, const std::string& device_class) {
    tree.write("/sys/bus/pci/devices/" + address + "/vendor", vendor + "\n");
    tree.write("/sys/bus/pci/devices/" + address + "/class", device_class + "\n");
  };
  pciDevice("0000:03:00.0", "0x1a03", "0x030000");  // the BMC's VGA
  pciDevice("0000:19:00.1", "0x10de", "0x040300");  // a GPU's HDMI audio
  const std::string checks = " --check gpu.driver,gpu.count --json";
  CommandResult none = doctor("--root " + tree.root() + checks);
  ASSERT_EQ(none.exit_code, 0) << "no NVIDIA GPU on the bus: nothing to fail\n" << none.output;
  EXPECT_EQ((*findCheck(jsonOf(none.output), "gpu.driver"))["status"], "SKIP") << none.output;

  pciDevice("0000:19:00.0", "0x10de", "0x030200");  // 3D controller
  pciDevice("0000:3b:00.0", "0x10de", "0x030200");
  CommandResult r = doctor("--root " + tree.root() + checks);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  nlohmann::json doc = jsonOf(r.output);
  for (const char* name : {"gpu.driver", "gpu.count"}) {
    const nlohmann::json& check = *findCheck(doc, name);
    EXPECT_EQ(check["status"], "FAIL") << check.dump();
    EXPECT_TRUE(contains(check["reason"], "the PCI bus has 2 NVIDIA GPUs (0000:19:00.0, 0000:3b:00.0)"))
        << check.dump();
  }
  EXPECT_TRUE(contains((*findCheck(doc, "gpu.driver"))["hint"], "modprobe nvidia")) << doc.dump(1);
}

TEST(DoctorCli, NcclEnvironmentComesFromTheProcess) {
  FixtureTree tree;
  tree.writeGoodNode();
  CommandResult r = doctor("--root " + tree.root() + " --check nccl --json",
                           "NCCL_SOCKET_IFNAME=^docker,lo NCCL_IB_HCA=mlx5_9 NCCL_DEBUG=INFO");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  nlohmann::json doc = jsonOf(r.output);
  EXPECT_EQ((*findCheck(doc, "nccl.socket_ifname"))["status"], "PASS");
  EXPECT_EQ((*findCheck(doc, "nccl.ib_hca"))["status"], "FAIL");
  EXPECT_EQ((*findCheck(doc, "nccl.debug_env"))["status"], "WARN");
}

TEST(DoctorCli, SkipLeavesChecksOut) {
  FixtureTree tree;
  tree.writeGoodNode();
  CommandResult r = doctor("--root " + tree.root() + " --check host --skip host.numa,host.time_sync --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json doc = jsonOf(r.output);
  EXPECT_EQ(doc["checks"].size(), 5u) << doc.dump(1);
  EXPECT_EQ(findCheck(doc, "host.numa"), nullptr);
}

TEST(DoctorCli, FilesThatAreDirectoriesGiveSkipsNotCrashes) {
  FixtureTree tree;
  tree.writeGoodNode();
  for (const char* file : {"/proc/sys/net/core/rmem_max", "/proc/self/limits", "/proc/mounts",
                           "/sys/fs/selinux/enforce", "/proc/net/ip_tables_names",
                           "/sys/class/infiniband/mlx5_0/ports/1/state", "/sys/class/net/eth0/operstate"}) {
    tree.remove(file);
    tree.makeDirectory(file);
  }
  CommandResult r = doctor("--root " + tree.root() + " " + kHostChecks + " --json",
                           "NCCL_SOCKET_IFNAME=eth0");
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 2) << r.output;
  nlohmann::json doc = jsonOf(r.output);
  for (const char* name : {"host.socket_buffers", "host.memlock", "host.selinux"}) {
    EXPECT_EQ((*findCheck(doc, name))["status"], "SKIP") << name;
  }
  for (const auto& check : doc["checks"]) {
    EXPECT_FALSE(contains(check["reason"], "check raised")) << check.dump();
  }
  // an unreadable port state is a port that is not up; eth0's state is unknown
  EXPECT_EQ((*findCheck(doc, "rdma.ports"))["status"], "FAIL");
  EXPECT_EQ((*findCheck(doc, "nccl.socket_ifname"))["status"], "FAIL");
}

TEST(DoctorCli, EmptyRootTreeDoesNotCrash) {
  FixtureTree tree;
  CommandResult r = doctor("--root " + tree.root() + " " + kHostChecks + " --json");
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 2) << r.output;
  nlohmann::json doc = jsonOf(r.output);
  EXPECT_GE(doc["checks"].size(), 12u);
}

TEST(DoctorCli, ListPrintsEveryCheck) {
  CommandResult r = doctor("--list");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* name : {"host.socket_buffers", "host.memlock", "host.shm", "host.selinux", "host.firewall",
                           "host.time_sync", "host.numa", "rdma.ports", "rdma.gpudirect", "nccl.socket_ifname",
                           "nccl.ib_hca", "nccl.debug_env", "peers.reachable"}) {
    EXPECT_TRUE(contains(r.output, std::string(name) + " ")) << name << "\n" << r.output;
  }
  EXPECT_TRUE(contains(r.output, "(active: runs with --peers")) << r.output;
}

TEST(DoctorCli, UnknownCheckNameExitsTwoNamingIt) {
  CommandResult r = doctor("--check host,disk.smart");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "unknown check 'disk.smart'")) << r.output;
  EXPECT_TRUE(contains(r.output, "host.memlock")) << r.output;
  CommandResult skip = doctor("--skip nvlink");
  EXPECT_EQ(skip.exit_code, 2) << skip.output;
  EXPECT_TRUE(contains(skip.output, "--skip: unknown check 'nvlink'")) << skip.output;
  EXPECT_EQ(doctor("--check \"\"").exit_code, 2);
  EXPECT_EQ(doctor("--skip ,").exit_code, 2);
  CommandResult empty = doctor("--check host,,rdma");
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
  EXPECT_TRUE(contains(empty.output, "empty item 2")) << empty.output;
}

TEST(DoctorCli, ActiveCheckWithoutItsOptionExitsTwo) {
  CommandResult r = doctor("--check peers");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "runs only with --peers")) << r.output;
}

TEST(DoctorCli, MissingRootExitsTwo) {
  CommandResult r = doctor("--root /nonexistent/fixture " + kHostChecks);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--root '/nonexistent/fixture': no such directory; expected an existing directory")) << r.output;
}

TEST(DoctorCli, BadNumbersExitTwo) {
  EXPECT_EQ(doctor("--expect-gpus -1").exit_code, 2);
  EXPECT_EQ(doctor("--expect-gpus many").exit_code, 2);
  EXPECT_EQ(doctor("--timeout 0 --peers 127.0.0.1:1").exit_code, 2);
}

TEST(DoctorCli, InvalidPeersEntriesExitTwoNamingTheEntry) {
  for (const char* entry : {"host", "host:", ":80", "host:0", "host:70000", "host:abc"}) {
    CommandResult r = doctor(std::string("--check host.selinux --peers ") + entry);
    EXPECT_EQ(r.exit_code, 2) << entry << ": " << r.output;
    EXPECT_TRUE(contains(r.output, std::string("--peers entry '") + entry + "'")) << r.output;
    EXPECT_TRUE(contains(r.output, "expected HOST:PORT")) << r.output;
  }
  for (const char* list : {"a:1,,b:2", "a:1,", "\"\""}) {
    CommandResult r = doctor(std::string("--check host.selinux --peers ") + list);
    EXPECT_EQ(r.exit_code, 2) << list << ": " << r.output;
    EXPECT_TRUE(contains(r.output, "is empty")) << r.output;
  }
  CommandResult serve = doctor("--serve-peer localhost");
  EXPECT_EQ(serve.exit_code, 2) << serve.output;
  EXPECT_TRUE(contains(serve.output, "--serve-peer entry 'localhost'")) << serve.output;
}

// `dtrain doctor --serve-peer 127.0.0.1:0` in the background; its address
// from the "listening on" line.
class ServedPeer {
 public:
  ServedPeer()
      : dir_(makeTempDir("dtrain-doctor-peer")),
        process_({dtrainBin(), "doctor", "--serve-peer", "127.0.0.1:0"}, {}, dir_ + "/peer.log") {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline && process_.running()) {
      std::string log = process_.log();
      size_t at = log.find("listening on ");
      if (at != std::string::npos && log.find('\n', at) != std::string::npos) {
        address_ = log.substr(at + 13, log.find('\n', at) - at - 13);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  const std::string& address() const { return address_; }
  BackgroundProcess& process() { return process_; }

 private:
  std::string dir_;
  BackgroundProcess process_;
  std::string address_;
};

TEST(DoctorCli, PeerServedByAnotherDtrainPassesWithABandwidth) {
  ServedPeer peer;
  ASSERT_EQ(peer.address().rfind("127.0.0.1:", 0), 0u) << peer.process().log();
  EXPECT_NE(peer.address(), "127.0.0.1:0");
  CommandResult r = doctor("--check peers --peers " + peer.address() + " --timeout 10 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json doc = jsonOf(r.output);
  ASSERT_EQ(doc["checks"].size(), 1u) << r.output;
  const auto& check = doc["checks"][0];
  EXPECT_EQ(check["name"], "peers.reachable");
  EXPECT_EQ(check["status"], "PASS") << check.dump();
  EXPECT_TRUE(contains(check["reason"], "Gbit/s")) << check.dump();
  EXPECT_TRUE(contains(check["detail"], peer.address() + ": connect ")) << check.dump();
  // SIGTERM ends the server cleanly.
  EXPECT_EQ(peer.process().stop(), 0) << peer.process().log();
  EXPECT_TRUE(contains(peer.process().log(), "stopped on signal")) << peer.process().log();
}

TEST(DoctorCli, ClosedPortFailsWithinTheTimeout) {
  ServedPeer peer;  // a port known to be free once the server has stopped
  ASSERT_FALSE(peer.address().empty()) << peer.process().log();
  std::string address = peer.address();
  peer.process().stop();
  auto start = std::chrono::steady_clock::now();
  CommandResult r = doctor("--check peers --peers " + address + " --timeout 3 --json");
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exit_code, 2) << r.output;
  nlohmann::json doc = jsonOf(r.output);
  EXPECT_EQ(doc["checks"][0]["status"], "FAIL");
  EXPECT_TRUE(contains(doc["checks"][0]["reason"], "unreachable: " + address)) << r.output;
  EXPECT_LT(took, std::chrono::seconds(3 + 2));
}

}  // namespace
}  // namespace dtrain::testing
