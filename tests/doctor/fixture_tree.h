// A fixture tree for `dtrain doctor --root`: a fresh directory under /tmp
// holding proc/..., sys/..., etc/... files that stand in for the live
// system. Removed on destruction unless DTRAIN_KEEP_FIXTURES is set.
#pragma once

#include <string>

namespace dtrain::testing {

class FixtureTree {
 public:
  FixtureTree();
  ~FixtureTree();
  FixtureTree(const FixtureTree&) = delete;
  FixtureTree& operator=(const FixtureTree&) = delete;

  const std::string& root() const { return root_; }
  // The host path of a system path inside the tree.
  std::string path(const std::string& system_path) const { return root_ + system_path; }

  // Writes `content` at the system path, creating the parent directories.
  void write(const std::string& system_path, const std::string& content);
  void makeDirectory(const std::string& system_path);
  // Removes a file or a whole directory.
  void remove(const std::string& system_path);

  // A node that passes every host, RDMA and NCCL-environment check: socket
  // buffers at 256/128 MiB, memlock unlimited, a 16 GiB /dev/shm, no
  // SELinux, no packet filter, lo/eth0/ib0 up and docker0 down, one RDMA
  // device mlx5_0 with port 1 ACTIVE at 400 Gb/sec, nvidia_peermem loaded,
  // two NUMA nodes, and the fake NVML's two GPUs (PCI 0000:19:00.0 on node
  // 0, 0000:3b:00.0 on node 1) with this process allowed on CPUs 0-15.
  void writeGoodNode();
  // One port of an RDMA device: state "4: ACTIVE", phys_state "5: LinkUp"...
  void writeRdmaPort(const std::string& device, int port, const std::string& state,
                     const std::string& phys_state, const std::string& rate = "400 Gb/sec (4X NDR)");
  // /proc/self/limits with the given soft and hard "Max locked memory".
  void writeMemlock(const std::string& soft, const std::string& hard);

 private:
  std::string root_;
};

}  // namespace dtrain::testing
