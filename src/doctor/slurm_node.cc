#include "doctor/slurm_node.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/host.h"
#include "common/text.h"
#include "doctor/host_check_functions.h"
#include "gpu/nvml.h"

namespace dtrain::doctor {
namespace {

constexpr const char* kCpuDir = "/sys/devices/system/cpu";

// The online CPUs: the "online" list, else every cpuN directory whose
// cpuN/online (absent for a CPU that cannot go offline) is not 0.
std::vector<int> onlineCpus(const SystemRoot& root) {
  const std::string online_path = std::string(kCpuDir) + "/online";
  if (auto text = root.read(online_path)) {
    auto cpus = parseCpuList(*text);
    if (!cpus) throw ConfigError(root.path(online_path) + ": expected a cpu list like 0-3,8-11, got '" +
                                 trimmed(*text) + "'");
    return *cpus;
  }
  std::vector<int> cpus;
  for (const std::string& name : root.list(kCpuDir)) {
    if (name.size() < 4 || name.compare(0, 3, "cpu") != 0) continue;
    if (!std::all_of(name.begin() + 3, name.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      continue;
    }
    auto online = root.readInt(std::string(kCpuDir) + "/" + name + "/online");
    if (online && *online == 0) continue;
    cpus.push_back(std::stoi(name.substr(3)));
  }
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

CpuTopology fromCounts(int cpus, int sockets, int cores) {
  CpuTopology topology;
  topology.cpus = cpus;
  topology.boards = 1;
  topology.sockets = std::max(sockets, 1);
  cores = std::max(cores, 1);
  topology.cores_per_socket = cores / topology.sockets;
  topology.threads_per_core = cpus / cores;
  return topology;
}

// hwloc's view from sysfs: a package per physical_package_id, a core per
// distinct set of hardware threads (core_cpus_list, the older
// thread_siblings_list, else package:core_id).
std::optional<CpuTopology> topologyFromSysfs(const SystemRoot& root) {
  std::vector<int> cpus = onlineCpus(root);
  if (cpus.empty()) return std::nullopt;
  std::set<long long> packages;
  std::set<std::string> cores;
  for (int cpu : cpus) {
    const std::string dir = std::string(kCpuDir) + "/cpu" + std::to_string(cpu) + "/topology/";
    auto package = root.readInt(dir + "physical_package_id");
    if (!package) return std::nullopt;
    packages.insert(*package);
    std::optional<std::string> core = root.readLine(dir + "core_cpus_list");
    if (!core) core = root.readLine(dir + "thread_siblings_list");
    if (!core) {
      auto core_id = root.readInt(dir + "core_id");
      if (!core_id) return std::nullopt;
      core = "id " + std::to_string(*core_id);
    }
    cores.insert(std::to_string(*package) + ":" + *core);
  }
  return fromCounts(static_cast<int>(cpus.size()), static_cast<int>(packages.size()),
                    static_cast<int>(cores.size()));
}

std::optional<long long> cpuinfoValue(const std::string& line, const std::string& key) {
  if (line.compare(0, key.size(), key) != 0) return std::nullopt;
  size_t colon = line.find(':');
  if (colon == std::string::npos || trimmed(line.substr(key.size(), colon - key.size())) != "") return std::nullopt;
  try {
    return std::stoll(line.substr(colon + 1));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<CpuTopology> topologyFromCpuinfo(const SystemRoot& root) {
  auto text = root.read("/proc/cpuinfo");
  if (!text) return std::nullopt;
  struct Processor {
    long long package = 0;
    std::optional<long long> core;
  };
  std::vector<Processor> processors;
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    if (cpuinfoValue(line, "processor")) {
      processors.emplace_back();
    } else if (processors.empty()) {
      continue;
    } else if (auto package = cpuinfoValue(line, "physical id")) {
      processors.back().package = *package;
    } else if (auto core = cpuinfoValue(line, "core id")) {
      processors.back().core = *core;
    }
  }
  if (processors.empty()) return std::nullopt;
  std::set<long long> packages;
  std::set<std::pair<long long, long long>> cores;
  for (size_t i = 0; i < processors.size(); ++i) {
    packages.insert(processors[i].package);
    // Without a core id every processor is a core of its own, as for hwloc.
    cores.insert({processors[i].package, processors[i].core ? *processors[i].core : -1 - static_cast<long long>(i)});
  }
  return fromCounts(static_cast<int>(processors.size()), static_cast<int>(packages.size()),
                    static_cast<int>(cores.size()));
}

}  // namespace

std::string readShortHostName(const SystemRoot& root) {
  std::optional<std::string> name = root.readLine("/proc/sys/kernel/hostname");
  if ((!name || name->empty()) && root.isLive()) name = hostName();
  if (!name || name->empty()) {
    throw ConfigError(root.path("/proc/sys/kernel/hostname") + ": cannot read the host name (expected one line)");
  }
  return name->substr(0, name->find('.'));
}

CpuTopology readCpuTopology(const SystemRoot& root) {
  if (auto topology = topologyFromSysfs(root)) return *topology;
  if (auto topology = topologyFromCpuinfo(root)) return *topology;
  throw ConfigError("cannot read the CPU topology: neither " + root.path(kCpuDir) +
                    " (online, cpuN/topology/physical_package_id) nor " + root.path("/proc/cpuinfo") +
                    " (processor lines) describes a CPU");
}

uint64_t readRealMemoryMiB(const SystemRoot& root) {
  auto text = root.read("/proc/meminfo");
  if (!text) throw ConfigError(root.path("/proc/meminfo") + ": cannot read (expected a MemTotal line)");
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::istringstream fields(line.substr(9));
    unsigned long long kib = 0;
    std::string unit;
    if (!(fields >> kib >> unit) || unit != "kB") break;
    // slurmd: (uint64_t)((float)sysconf(_SC_PHYS_PAGES) * (page_size / 1048576.0)),
    // where glibc's _SC_PHYS_PAGES is MemTotal in pages.
    const long page_size = ::sysconf(_SC_PAGESIZE) > 0 ? ::sysconf(_SC_PAGESIZE) : 4096;
    const unsigned long long pages = kib * 1024 / static_cast<unsigned long long>(page_size);
    return static_cast<uint64_t>(static_cast<float>(pages) * (static_cast<double>(page_size) / 1048576.0));
  }
  throw ConfigError(root.path("/proc/meminfo") + ": expected a line 'MemTotal: <n> kB'");
}

std::string slurmGresType(const std::string& nvml_device_name) {
  std::string type = nvml_device_name;
  for (char& c : type) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (c == ' ') c = '_';
  }
  return type;
}

std::vector<SlurmGpu> readSlurmGpus(gpu::Nvml& nvml) {
  std::vector<SlurmGpu> gpus;
  for (unsigned gpu : nvml.gpus()) {
    auto name = nvml.name(gpu);
    auto minor = nvml.minorNumber(gpu);
    if (!name || !minor) {
      throw IoError("NVML gives no " + std::string(!name ? "name" : "minor number") + " for GPU " +
                    std::to_string(gpu) + " (" + nvml.libraryName() + ")");
    }
    gpus.push_back({slurmGresType(*name), *minor});
  }
  return gpus;
}

SlurmNode describeSlurmNode(const SystemRoot& root, bool use_nvml) {
  SlurmNode node;
  node.name = readShortHostName(root);
  node.cpu = readCpuTopology(root);
  node.real_memory_mib = readRealMemoryMiB(root);
  if (!use_nvml) {
    node.no_gpu_reason = "GPUs not asked for (--no-gpus)";
    return node;
  }
  std::unique_ptr<gpu::Nvml> nvml;
  try {
    nvml = gpu::Nvml::open();
  } catch (const IoError& e) {
    node.no_gpu_reason = e.message();
    return node;
  }
  node.gpus = readSlurmGpus(*nvml);
  if (node.gpus.empty()) node.no_gpu_reason = "NVML (" + nvml->libraryName() + ") lists no GPUs";
  return node;
}

namespace {

// The GPU types in order of first appearance, with their minors.
std::vector<std::pair<std::string, std::vector<unsigned>>> gpusByType(const std::vector<SlurmGpu>& gpus) {
  std::vector<std::pair<std::string, std::vector<unsigned>>> types;
  for (const SlurmGpu& gpu : gpus) {
    auto it = std::find_if(types.begin(), types.end(), [&](const auto& t) { return t.first == gpu.type; });
    if (it == types.end()) {
      types.push_back({gpu.type, {}});
      it = types.end() - 1;
    }
    it->second.push_back(gpu.minor);
  }
  return types;
}

}  // namespace

std::string slurmNodeLine(const SlurmNode& node) {
  std::ostringstream line;
  line << "NodeName=" << node.name << " CPUs=" << node.cpu.cpus << " Boards=" << node.cpu.boards
       << " SocketsPerBoard=" << node.cpu.sockets / std::max(node.cpu.boards, 1)
       << " CoresPerSocket=" << node.cpu.cores_per_socket << " ThreadsPerCore=" << node.cpu.threads_per_core
       << " RealMemory=" << node.real_memory_mib;
  if (!node.gpus.empty()) {
    line << " Gres=";
    bool first = true;
    for (const auto& [type, minors] : gpusByType(node.gpus)) {
      line << (first ? "" : ",") << "gpu:" << type << ":" << minors.size();
      first = false;
    }
  }
  return line.str();
}

std::vector<std::string> gresConfLines(const SlurmNode& node, bool device_files) {
  if (node.gpus.empty()) return {"# no GPUs found: " + node.no_gpu_reason};
  if (!device_files) return {"AutoDetect=nvml"};
  std::vector<std::string> lines;
  for (const auto& [type, minors] : gpusByType(node.gpus)) {
    lines.push_back("NodeName=" + node.name + " Name=gpu Type=" + type + " File=" + nvidiaDeviceFiles(minors));
  }
  return lines;
}

std::string nvidiaDeviceFiles(std::vector<unsigned> minors) {
  std::sort(minors.begin(), minors.end());
  minors.erase(std::unique(minors.begin(), minors.end()), minors.end());
  std::ostringstream files;
  files << "/dev/nvidia";
  if (minors.size() == 1) {
    files << minors[0];
    return files.str();
  }
  files << '[';
  for (size_t i = 0; i < minors.size();) {
    size_t j = i;
    while (j + 1 < minors.size() && minors[j + 1] == minors[j] + 1) ++j;
    files << (i == 0 ? "" : ",") << minors[i];
    if (j > i) files << '-' << minors[j];
    i = j + 1;
  }
  files << ']';
  return files.str();
}

}  // namespace dtrain::doctor
