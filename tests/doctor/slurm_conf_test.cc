// `dtrain slurm conf`: fixture trees through --root (sockets, hyperthreads,
// offline CPUs, /proc/cpuinfo only, a 2 TiB machine), this machine against
// `slurmd -C`, GPUs from the fake NVML, and bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tests/support/command.h"
#include "../gpu/fake_nvml_values.h"
#include "doctor/slurm_node.h"
#include "tests/support/temp_dir.h"

namespace dtrain::testing {
namespace {

namespace fs = std::filesystem;

// A fixture tree standing in for "/", removed at the end of the test.
class FixtureRoot {
 public:
  const std::string& dir() const { return dir_.path(); }

  void write(const std::string& path, const std::string& text) const {
    fs::path file = fs::path(dir_.path()) / path.substr(1);
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
  }
  // cpuN/topology for each {cpu, package, core-siblings list}.
  void cpu(int cpu, int package, const std::string& core_cpus) const {
    std::string topology = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    write(topology + "physical_package_id", std::to_string(package) + "\n");
    write(topology + "core_cpus_list", core_cpus + "\n");
  }
  void standard(const std::string& host = "gpu-node-07.cluster.local", const std::string& mem_kb = "24684092") const {
    write("/proc/sys/kernel/hostname", host + "\n");
    write("/proc/meminfo", "MemTotal:       " + mem_kb + " kB\nMemFree:         1000 kB\n");
  }

 private:
  TempDir dir_{"dtrain-slurm-conf"};
};

std::string slurmConf(const std::string& args, const std::string& env = "") {
  return "env DTRAIN_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 " + env + " " + dtrainBin() + " slurm conf " + args;
}

std::string lineStartingWith(const std::string& text, const std::string& prefix) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "";
}

// "A=1 B=2" -> {A: 1, B: 2}
std::map<std::string, std::string> fields(const std::string& line) {
  std::map<std::string, std::string> out;
  std::istringstream words(line);
  for (std::string word; words >> word;) {
    size_t eq = word.find('=');
    if (eq != std::string::npos) out[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return out;
}

TEST(SlurmConfTest, TwoSocketsWithHyperthreadsFromSysfs) {
  FixtureRoot root;
  root.standard();
  root.write("/sys/devices/system/cpu/online", "0-7\n");
  // Linux numbering: cpu N and N+4 are the two threads of one core.
  for (int cpu = 0; cpu < 8; ++cpu) {
    int core = cpu % 4;
    root.cpu(cpu, core / 2, std::to_string(core) + "," + std::to_string(core + 4));
  }
  auto r = runCommand(slurmConf("--root " + root.dir()), 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 24684092 kB = 6171023 pages of 4 KiB = 24105.56 MiB.
  EXPECT_EQ(r.output,
            "# slurm.conf\n"
            "NodeName=gpu-node-07 CPUs=8 Boards=1 SocketsPerBoard=2 CoresPerSocket=2 ThreadsPerCore=2 "
            "RealMemory=24105\n"
            "# gres.conf\n"
            "# no GPUs found: NVML not available: /nonexistent/libnvidia-ml.so.1: cannot open shared object "
            "file: No such file or directory\n");
}

TEST(SlurmConfTest, OfflineCpusAreNotCounted) {
  FixtureRoot root;
  root.standard("n1");
  root.write("/sys/devices/system/cpu/online", "0-1,3\n");
  for (int cpu = 0; cpu < 4; ++cpu) root.cpu(cpu, 0, std::to_string(cpu));
  auto r = runCommand(slurmConf("--root " + root.dir() + " --only node"), 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output,
            "NodeName=n1 CPUs=3 Boards=1 SocketsPerBoard=1 CoresPerSocket=3 ThreadsPerCore=1 RealMemory=24105\n");
}

TEST(SlurmConfTest, OnlineListMissingFallsBackToCpuDirectories) {
  FixtureRoot root;
  root.standard("n2");
  for (int cpu = 0; cpu < 4; ++cpu) root.cpu(cpu, cpu / 2, std::to_string(cpu));
  root.write("/sys/devices/system/cpu/cpu3/online", "0\n");
  root.write("/sys/devices/system/cpu/cpufreq/policy0", "");
  auto r = runCommand(slurmConf("--root " + root.dir() + " --only node"), 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // cpu3 is offline: package 0 has 2 cores, package 1 one; 3 cores / 2 sockets.
  EXPECT_EQ(fields(r.output)["CPUs"], "3") << r.output;
  EXPECT_EQ(fields(r.output)["SocketsPerBoard"], "2") << r.output;
}

TEST(SlurmConfTest, ProcCpuinfoAloneGivesTheTopology) {
  FixtureRoot root;
  root.standard("c1");
  std::string cpuinfo;
  // 2 packages x 2 cores x 2 threads.
  for (int cpu = 0; cpu < 8; ++cpu) {
    cpuinfo += "processor\t: " + std::to_string(cpu) + "\nmodel name\t: Test CPU\nphysical id\t: " +
               std::to_string(cpu / 4) + "\nsiblings\t: 4\ncore id\t\t: " + std::to_string(cpu % 2) +
               "\ncpu cores\t: 2\n\n";
  }
  root.write("/proc/cpuinfo", cpuinfo);
  auto r = runCommand(slurmConf("--root " + root.dir() + " --only node"), 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output,
            "NodeName=c1 CPUs=8 Boards=1 SocketsPerBoard=2 CoresPerSocket=2 ThreadsPerCore=2 RealMemory=24105\n");
}

TEST(SlurmConfTest, RealMemoryKeepsSlurmdsFloatRounding) {
  if (::sysconf(_SC_PAGESIZE) != 4096) GTEST_SKIP() << "the expected values assume 4 KiB pages";
  FixtureRoot root;
  // 536870911 pages: as a float 2^29, so slurmd says 2097152 MiB where exact
  // arithmetic gives 2097151.
  root.standard("big", "2147483644");
  root.write("/proc/cpuinfo", "processor\t: 0\n");
  dtrain::SystemRoot system_root(root.dir());
  EXPECT_EQ(doctor::readRealMemoryMiB(system_root), 2097152u);
  root.write("/proc/meminfo", "MemTotal:        1048572 kB\n");  // 262143 pages, exact in a float
  EXPECT_EQ(doctor::readRealMemoryMiB(system_root), 1023u);
}

TEST(SlurmConfTest, ThisMachineMatchesSlurmdC) {
  auto slurmd = runCommand("PATH=$PATH:/usr/sbin:/sbin command -v slurmd", 10);
  ASSERT_EQ(slurmd.exit_code, 0) << "slurmd is not installed (Debian package slurmd; scripts/setup.sh installs it)";
  auto expected = runCommand("PATH=$PATH:/usr/sbin:/sbin slurmd -C", 60);
  ASSERT_EQ(expected.exit_code, 0) << expected.output;
  auto actual = runCommand(slurmConf("--only node --no-gpus"), 30);
  ASSERT_EQ(actual.exit_code, 0) << actual.output;
  std::string slurmd_line = lineStartingWith(expected.output, "NodeName=");
  ASSERT_FALSE(slurmd_line.empty()) << expected.output;
  auto want = fields(slurmd_line);
  auto got = fields(actual.output);
  want.erase("UpTime");
  for (const char* key : {"NodeName", "CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore",
                          "RealMemory"}) {
    EXPECT_EQ(got[key], want[key]) << key << ": slurmd -C says '" << slurmd_line << "', dtrain says '"
                                   << actual.output << "'";
  }
  EXPECT_EQ(got, want) << slurmd_line << "\n" << actual.output;
}

TEST(SlurmConfTest, GpusFromNvmlGiveGresAndGresConf) {
  namespace fake = fake_nvml;
  FixtureRoot root;
  root.standard("g1");
  root.write("/proc/cpuinfo", "processor\t: 0\n");
  const std::string env = "DTRAIN_NVML_LIBRARY=" DTRAIN_FAKE_NVML;
  auto r = runCommand(slurmConf("--root " + root.dir(), env), 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(lineStartingWith(r.output, "NodeName="),
            "NodeName=g1 CPUs=1 Boards=1 SocketsPerBoard=1 CoresPerSocket=1 ThreadsPerCore=1 RealMemory=24105 "
            "Gres=gpu:nvidia_h100_80gb_hbm3:" + std::to_string(fake::kGpus));
  EXPECT_NE(r.output.find("# gres.conf\nAutoDetect=nvml\n"), std::string::npos) << r.output;

  auto files = runCommand(slurmConf("--root " + root.dir() + " --only gres --gres-files", env), 30);
  ASSERT_EQ(files.exit_code, 0) << files.output;
  // The fake GPUs' minors are 0 and 3.
  EXPECT_EQ(files.output, "NodeName=g1 Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia[0,3]\n");

  auto no_gpus = runCommand(slurmConf("--root " + root.dir() + " --no-gpus", env), 30);
  ASSERT_EQ(no_gpus.exit_code, 0) << no_gpus.output;
  EXPECT_EQ(no_gpus.output.find("Gres="), std::string::npos) << no_gpus.output;
  EXPECT_NE(no_gpus.output.find("# no GPUs found: GPUs not asked for (--no-gpus)"), std::string::npos)
      << no_gpus.output;
}

TEST(SlurmConfTest, GresTypeAndDeviceFilesFollowSlurm) {
  EXPECT_EQ(doctor::slurmGresType("NVIDIA H100 80GB HBM3"), "nvidia_h100_80gb_hbm3");
  EXPECT_EQ(doctor::slurmGresType("Tesla V100-SXM2-16GB"), "tesla_v100-sxm2-16gb");
  EXPECT_EQ(doctor::nvidiaDeviceFiles({0}), "/dev/nvidia0");
  EXPECT_EQ(doctor::nvidiaDeviceFiles({3, 0, 1, 2, 6}), "/dev/nvidia[0-3,6]");
  EXPECT_EQ(doctor::nvidiaDeviceFiles({0, 2, 4}), "/dev/nvidia[0,2,4]");

  doctor::SlurmNode node;
  node.name = "mixed";
  node.cpu = {4, 1, 1, 4, 1};
  node.real_memory_mib = 1000;
  node.gpus = {{"nvidia_a100-sxm4-80gb", 0}, {"nvidia_a100-sxm4-80gb", 1}, {"nvidia_l4", 2}};
  EXPECT_EQ(doctor::slurmNodeLine(node),
            "NodeName=mixed CPUs=4 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=1000 "
            "Gres=gpu:nvidia_a100-sxm4-80gb:2,gpu:nvidia_l4:1");
  EXPECT_EQ(doctor::gresConfLines(node, true),
            (std::vector<std::string>{"NodeName=mixed Name=gpu Type=nvidia_a100-sxm4-80gb File=/dev/nvidia[0-1]",
                                      "NodeName=mixed Name=gpu Type=nvidia_l4 File=/dev/nvidia2"}));
}

// Bad input: each exits 2 with a message naming the input and what was expected.
TEST(SlurmConfTest, BadInputIsNamed) {
  FixtureRoot empty;
  FixtureRoot no_cpu;
  no_cpu.standard();
  FixtureRoot bad_online;
  bad_online.standard();
  bad_online.write("/sys/devices/system/cpu/online", "0-x\n");
  FixtureRoot no_memtotal;
  no_memtotal.standard();
  no_memtotal.write("/proc/cpuinfo", "processor\t: 0\n");
  no_memtotal.write("/proc/meminfo", "MemFree: 12 kB\n");
  FixtureRoot unreadable;  // root reads any file, but not a directory
  unreadable.standard();
  unreadable.write("/proc/cpuinfo", "processor\t: 0\n");
  fs::remove(unreadable.dir() + "/proc/meminfo");
  fs::create_directory(unreadable.dir() + "/proc/meminfo");  // a directory cannot be read as a file

  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--root /nonexistent/root", "--root '/nonexistent/root': no such directory; expected an existing directory"},
      {"--root " + empty.dir(), empty.dir() + "/proc/sys/kernel/hostname: cannot read the host name"},
      {"--root " + no_cpu.dir(), "cannot read the CPU topology: neither " + no_cpu.dir() + "/sys/devices/system/cpu"},
      {"--root " + bad_online.dir(),
       bad_online.dir() + "/sys/devices/system/cpu/online: expected a cpu list like 0-3,8-11, got '0-x'"},
      {"--root " + no_memtotal.dir(), no_memtotal.dir() + "/proc/meminfo: expected a line 'MemTotal: <n> kB'"},
      {"--root " + unreadable.dir(), unreadable.dir() + "/proc/meminfo: expected a line 'MemTotal: <n> kB'"},
      {"--only cpus", "--only 'cpus': unknown; expected one of node or gres"},
  };
  for (const auto& [args, message] : cases) {
    auto r = runCommand(slurmConf(args), 30);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << ": expected '" << message << "' in\n"
                                                         << r.output;
  }
}

}  // namespace
}  // namespace dtrain::testing
