// How much memory this process can still take on its host: the kernel's
// estimate (/proc/meminfo MemAvailable), lowered to what the memory
// cgroup the process runs in leaves (v2: memory.max - memory.current; v1:
// memory.limit_in_bytes - memory.usage_in_bytes). Read through a
// SystemRoot, so tests give a fixture tree.
#pragma once

#include <cstdint>
#include <string>

#include "common/system_root.h"

namespace dtrain {

struct HostMemory {
  int64_t available = 0;     // bytes; 0 when /proc/meminfo says nothing
  int64_t meminfo = 0;       // MemAvailable
  int64_t cgroup_left = -1;  // the cgroup's limit less its usage; -1: no limit
  std::string cgroup;        // the cgroup's path when it limits, for messages
};

HostMemory hostMemory(const SystemRoot& root = SystemRoot());

// "21.9 GiB available (MemAvailable 22.4 GiB; cgroup /job limit leaves 21.9 GiB)".
std::string describeHostMemory(const HostMemory& memory);

}  // namespace dtrain
