// hostMemory(): MemAvailable, lowered to what a memory cgroup (v1 or v2)
// leaves, read from fixture trees.
#include "common/host_memory.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "common/files.h"
#include "tests/support/temp_dir.h"

namespace dtrain {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

void put(const std::string& root, const std::string& path, const std::string& text) {
  const std::string full = root + path;
  ASSERT_EQ(makeDirectories(full.substr(0, full.rfind('/'))), 0);
  std::ofstream(full) << text;
}

const char* kMeminfo = "MemTotal:       25165824 kB\nMemFree:        20000000 kB\nMemAvailable:   16777216 kB\n";

TEST(HostMemoryTest, MemAvailableWithoutALimit) {
  testing::TempDir root("host-memory-plain");
  put(root.path(), "/proc/meminfo", kMeminfo);
  put(root.path(), "/proc/self/cgroup", "0::/\n");
  put(root.path(), "/sys/fs/cgroup/memory.max", "max\n");
  const HostMemory m = hostMemory(SystemRoot(root.path()));
  EXPECT_EQ(m.meminfo, 16 * kGiB);
  EXPECT_EQ(m.available, 16 * kGiB);
  EXPECT_EQ(m.cgroup_left, -1);
  EXPECT_EQ(describeHostMemory(m), "16.0 GiB available (MemAvailable 16.0 GiB)");
}

TEST(HostMemoryTest, ACgroupV2LimitLowersIt) {
  testing::TempDir root("host-memory-v2");
  put(root.path(), "/proc/meminfo", kMeminfo);
  put(root.path(), "/proc/self/cgroup", "0::/job/step\n");
  put(root.path(), "/sys/fs/cgroup/job/step/memory.max", std::to_string(8 * kGiB) + "\n");
  put(root.path(), "/sys/fs/cgroup/job/step/memory.current", std::to_string(2 * kGiB) + "\n");
  const HostMemory m = hostMemory(SystemRoot(root.path()));
  EXPECT_EQ(m.available, 6 * kGiB);
  EXPECT_EQ(m.cgroup_left, 6 * kGiB);
  EXPECT_EQ(describeHostMemory(m), "6.0 GiB available (MemAvailable 16.0 GiB; the limit of cgroup /job/step leaves "
                                   "6.0 GiB)");
}

TEST(HostMemoryTest, ACgroupV1LimitLowersItAndUnlimitedDoesNot) {
  testing::TempDir root("host-memory-v1");
  put(root.path(), "/proc/meminfo", kMeminfo);
  put(root.path(), "/proc/self/cgroup", "4:memory:/slurm/job1\n0::/\n");
  put(root.path(), "/sys/fs/cgroup/memory/slurm/job1/memory.limit_in_bytes", std::to_string(4 * kGiB) + "\n");
  put(root.path(), "/sys/fs/cgroup/memory/slurm/job1/memory.usage_in_bytes", std::to_string(1 * kGiB) + "\n");
  EXPECT_EQ(hostMemory(SystemRoot(root.path())).available, 3 * kGiB);
  put(root.path(), "/sys/fs/cgroup/memory/slurm/job1/memory.limit_in_bytes", "9223372036854771712\n");
  const HostMemory unlimited = hostMemory(SystemRoot(root.path()));
  EXPECT_EQ(unlimited.available, 16 * kGiB);
  EXPECT_EQ(unlimited.cgroup_left, -1);
}

}  // namespace
}  // namespace dtrain
