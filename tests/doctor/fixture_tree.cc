#include "fixture_tree.h"
#include "tests/support/temp_dir.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace dtrain::testing {

namespace fs = std::filesystem;

FixtureTree::FixtureTree() : root_(makeTempDir("dtrain-doctor-fixture")) {}

FixtureTree::~FixtureTree() {
  if (std::getenv("DTRAIN_KEEP_FIXTURES") != nullptr) return;
  removeTree(root_);
}

void FixtureTree::write(const std::string& system_path, const std::string& content) {
  fs::path file = path(system_path);
  fs::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << content;
  if (!out) throw std::runtime_error("cannot write fixture file " + file.string());
}

void FixtureTree::makeDirectory(const std::string& system_path) { fs::create_directories(path(system_path)); }

void FixtureTree::remove(const std::string& system_path) { fs::remove_all(path(system_path)); }

void FixtureTree::writeRdmaPort(const std::string& device, int port, const std::string& state,
                                const std::string& phys_state, const std::string& rate) {
  const std::string dir = "/sys/class/infiniband/" + device + "/ports/" + std::to_string(port);
  write(dir + "/state", state + "\n");
  write(dir + "/phys_state", phys_state + "\n");
  write(dir + "/rate", rate + "\n");
  write(dir + "/link_layer", "InfiniBand\n");
}

void FixtureTree::writeMemlock(const std::string& soft, const std::string& hard) {
  auto row = [](const std::string& name, const std::string& a, const std::string& b, const std::string& unit) {
    std::string line = name;
    line.resize(26, ' ');
    std::string soft_field = a;
    soft_field.resize(21, ' ');
    std::string hard_field = b;
    hard_field.resize(21, ' ');
    return line + soft_field + hard_field + unit + "\n";
  };
  write("/proc/self/limits", row("Limit", "Soft Limit", "Hard Limit", "Units     ") +
                                 row("Max open files", "1024", "1048576", "files     ") +
                                 row("Max locked memory", soft, hard, "bytes     ") +
                                 row("Max address space", "unlimited", "unlimited", "bytes     "));
}

void FixtureTree::writeGoodNode() {
  write("/proc/sys/net/core/rmem_max", "268435456\n");
  write("/proc/sys/net/core/wmem_max", "268435456\n");
  write("/proc/sys/net/ipv4/tcp_rmem", "4096\t87380\t134217728\n");
  write("/proc/sys/net/ipv4/tcp_wmem", "4096\t65536\t134217728\n");
  writeMemlock("unlimited", "unlimited");
  write("/proc/mounts",
        "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
        "tmpfs /dev/shm tmpfs rw,nosuid,nodev,size=16777216k,inode64 0 0\n");
  write("/proc/net/ip_tables_names", "");
  write("/proc/net/ip6_tables_names", "");
  write("/proc/modules", "nvidia_peermem 16384 0 - Live 0x0000000000000000\nmlx5_ib 471040 0 - Live 0x0\n");
  write("/sys/class/net/lo/operstate", "unknown\n");
  write("/sys/class/net/eth0/operstate", "up\n");
  write("/sys/class/net/ib0/operstate", "up\n");
  write("/sys/class/net/docker0/operstate", "down\n");
  writeRdmaPort("mlx5_0", 1, "4: ACTIVE", "5: LinkUp");
  makeDirectory("/sys/module/nvidia_peermem");
  makeDirectory("/sys/devices/system/node/node0");
  makeDirectory("/sys/devices/system/node/node1");
  write("/sys/devices/system/node/possible", "0-1\n");
  write("/proc/self/status", "Name:\tdtrain\nCpus_allowed:\tffff\nCpus_allowed_list:\t0-15\n");
  write("/sys/bus/pci/devices/0000:19:00.0/numa_node", "0\n");
  write("/sys/bus/pci/devices/0000:19:00.0/local_cpulist", "0-7\n");
  write("/sys/bus/pci/devices/0000:3b:00.0/numa_node", "1\n");
  write("/sys/bus/pci/devices/0000:3b:00.0/local_cpulist", "8-15\n");
}

}  // namespace dtrain::testing
