#include "common/host_memory.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>

namespace dtrain {
namespace {

std::optional<int64_t> meminfoField(const SystemRoot& root, const std::string& field) {
  const auto text = root.read("/proc/meminfo");
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) != 0) continue;
    long long kib = 0;
    if (std::sscanf(line.c_str() + field.size() + 1, "%lld", &kib) == 1 && kib >= 0) return kib * 1024;
  }
  return std::nullopt;
}

// A limit file's value: a number, or nullopt for "max", a huge v1
// "unlimited" (close to 2^63) or a missing file.
std::optional<int64_t> limitOf(const SystemRoot& root, const std::string& path) {
  const auto line = root.readLine(path);
  if (!line || *line == "max") return std::nullopt;
  long long value = 0;
  if (std::sscanf(line->c_str(), "%lld", &value) != 1 || value <= 0 || value >= (1LL << 62)) return std::nullopt;
  return value;
}

// The cgroup path of this process for `controller` ("" for v2's "0::").
std::optional<std::string> cgroupOf(const SystemRoot& root, const std::string& controller) {
  const auto text = root.read("/proc/self/cgroup");
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) {
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    bool match = controllers == controller;
    std::istringstream list(controllers);
    for (std::string c; !match && std::getline(list, c, ',');) match = c == controller;
    if (match) return line.substr(second + 1);
  }
  return std::nullopt;
}

}  // namespace

HostMemory hostMemory(const SystemRoot& root) {
  HostMemory memory;
  memory.meminfo = meminfoField(root, "MemAvailable").value_or(0);
  memory.available = memory.meminfo;
  // v2 (unified): "0::/path"; v1: "N:memory:/path". A limit applies when set.
  struct Try {
    std::string controller, base, limit, usage;
  };
  for (const Try& t : {Try{"", "/sys/fs/cgroup", "memory.max", "memory.current"},
                       Try{"memory", "/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes"}}) {
    const auto path = cgroupOf(root, t.controller);
    if (!path) continue;
    std::string dir = t.base + (*path == "/" ? "" : *path);
    // In a container the cgroup file system is often mounted at the
    // process's own cgroup, which /proc/self/cgroup still names in full.
    if (!root.exists(dir + "/" + t.limit)) dir = t.base;
    const auto limit = limitOf(root, dir + "/" + t.limit);
    if (!limit) continue;
    const auto usage = root.readInt(dir + "/" + t.usage);
    memory.cgroup_left = std::max<int64_t>(0, *limit - (usage ? static_cast<int64_t>(*usage) : 0));
    memory.cgroup = *path;
    memory.available = memory.available > 0 ? std::min(memory.available, memory.cgroup_left) : memory.cgroup_left;
    break;
  }
  return memory;
}

std::string describeHostMemory(const HostMemory& memory) {
  const auto gib = [](int64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
    return std::string(text);
  };
  std::string text = gib(memory.available) + " available (MemAvailable " + gib(memory.meminfo);
  if (memory.cgroup_left >= 0) text += "; the limit of cgroup " + memory.cgroup + " leaves " + gib(memory.cgroup_left);
  return text + ")";
}

}  // namespace dtrain
