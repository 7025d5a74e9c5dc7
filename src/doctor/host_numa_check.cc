// host.numa: which NUMA node each GPU hangs off, and whether this process
// may run on that node's CPUs.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include "doctor/host_check_functions.h"
#include "gpu/nvml.h"

namespace dtrain::doctor {
namespace {

// NVML's "00000000:3B:00.0" (8-digit domain) -> sysfs's "0000:3b:00.0".
std::optional<std::string> sysfsPciAddress(const std::string& nvml_bus_id) {
  size_t colon = nvml_bus_id.find(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  char* end = nullptr;
  unsigned long domain = std::strtoul(nvml_bus_id.substr(0, colon).c_str(), &end, 16);
  if (end == nullptr || *end != '\0') return std::nullopt;
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "%04lx", domain);
  std::string rest = nvml_bus_id.substr(colon);
  std::transform(rest.begin(), rest.end(), rest.begin(), [](unsigned char c) { return std::tolower(c); });
  return std::string(buffer) + rest;
}

int numaNodeCount(const DoctorContext& ctx) {
  int count = 0;
  for (const std::string& entry : ctx.root.list("/sys/devices/system/node")) {
    if (entry.size() > 4 && entry.rfind("node", 0) == 0 &&
        entry.find_first_not_of("0123456789", 4) == std::string::npos) {
      ++count;
    }
  }
  return count;
}

std::optional<std::string> cpusAllowed(const DoctorContext& ctx) {
  auto status = ctx.root.read("/proc/self/status");
  if (!status) return std::nullopt;
  std::istringstream in(*status);
  std::string line;
  const std::string label = "Cpus_allowed_list:";
  while (std::getline(in, line)) {
    if (line.rfind(label, 0) != 0) continue;
    std::string value = line.substr(label.size());
    value.erase(0, value.find_first_not_of(" \t"));
    return value;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::vector<int>> parseCpuList(const std::string& text) {
  std::vector<int> cpus;
  std::string trimmed = text;
  while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.back()))) trimmed.pop_back();
  if (trimmed.empty()) return cpus;
  std::istringstream in(trimmed);
  std::string range;
  while (std::getline(in, range, ',')) {
    size_t dash = range.find('-');
    std::string first = range.substr(0, dash);
    std::string last = dash == std::string::npos ? first : range.substr(dash + 1);
    auto number = [](const std::string& s) -> std::optional<int> {
      if (s.empty() || s.size() > 7 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
      return std::atoi(s.c_str());
    };
    auto a = number(first), b = number(last);
    if (!a || !b || *a > *b) return std::nullopt;
    for (int cpu = *a; cpu <= *b; ++cpu) cpus.push_back(cpu);
  }
  return cpus;
}

CheckResult checkNuma(const DoctorContext& ctx) {
  const std::string name = "host.numa";
  if (ctx.nvml == nullptr) {
    return skip(name, ctx.nvml_error.empty() ? std::string("NVML not available") : ctx.nvml_error);
  }
  const auto& gpus = ctx.nvml->gpus();
  if (gpus.empty()) return skip(name, "NVML lists no GPUs");

  int nodes = numaNodeCount(ctx);
  std::optional<std::vector<int>> allowed;
  if (auto list = cpusAllowed(ctx)) allowed = parseCpuList(*list);
  std::set<int> allowed_set;
  if (allowed) allowed_set.insert(allowed->begin(), allowed->end());

  std::vector<std::string> mapping, problems, detail;
  for (unsigned gpu : gpus) {
    std::string label = "GPU" + std::to_string(gpu);
    auto bus_id = ctx.nvml->pciBusId(gpu);
    auto address = bus_id ? sysfsPciAddress(*bus_id) : std::nullopt;
    if (!address) {
      mapping.push_back(label + "->?");
      detail.push_back(label + ": NVML gave no PCI bus id");
      continue;
    }
    const std::string device = "/sys/bus/pci/devices/" + *address;
    auto node = ctx.root.readInt(device + "/numa_node");
    auto local = ctx.root.readLine(device + "/local_cpulist");
    std::string line = label + " " + *address + ": numa_node " + (node ? std::to_string(*node) : "unreadable") +
                       ", local CPUs " + (local ? *local : "unreadable");
    detail.push_back(line);
    mapping.push_back(label + "->" + (node ? (*node < 0 ? "none" : "node" + std::to_string(*node)) : "?"));
    if (node && *node < 0 && nodes > 1) {
      problems.push_back(label + " has no NUMA node (numa_node -1) on a " + std::to_string(nodes) + "-node machine");
    }
    auto local_cpus = local ? parseCpuList(*local) : std::nullopt;
    if (allowed && local_cpus && !local_cpus->empty()) {
      bool intersects = std::any_of(local_cpus->begin(), local_cpus->end(),
                                    [&](int cpu) { return allowed_set.count(cpu) > 0; });
      if (!intersects) problems.push_back(label + "'s local CPUs " + *local + " are outside this process's CPUs");
    }
  }
  std::string detail_text;
  for (const std::string& d : detail) detail_text += d + "\n";
  if (allowed) detail_text += "this process may run on CPUs " + *cpusAllowed(ctx) + "\n";
  std::string map_text;
  for (const std::string& m : mapping) map_text += (map_text.empty() ? "" : ", ") + m;
  if (!problems.empty()) {
    std::string list;
    for (const std::string& p : problems) list += (list.empty() ? "" : "; ") + p;
    return warn(name, list + " (" + map_text + ")",
                "bind each rank to its GPU's NUMA node: srun --cpu-bind=socket / --gpu-bind=closest, "
                "or numactl --cpunodebind=<node>; a numa_node of -1 is fixed in the BIOS (NUMA/SNC) or "
                "hypervisor settings",
                detail_text);
  }
  return pass(name, map_text + " across " + std::to_string(nodes) + " NUMA node(s)", detail_text);
}

}  // namespace dtrain::doctor
