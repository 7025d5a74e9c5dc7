// This node as Slurm describes it (doctor/): the slurm.conf node line that
// `slurmd -C` prints and the matching gres.conf lines, for
// `dtrain slurm conf`. Everything is read through a SystemRoot, so tests give
// fixture trees; GPUs come from NVML (exporter/nvml.h).
//
// How slurmd -C (Slurm 22.05, built with hwloc 2) computes each field, and so
// how these functions do:
//   NodeName        gethostname() up to the first '.'; here the kernel's
//                   /proc/sys/kernel/hostname, which is what gethostname()
//                   returns.
//   CPUs            hwloc's PU count: the online CPUs
//                   (/sys/devices/system/cpu/online).
//   Boards          groups directly below hwloc's root, else 1; Linux hwloc
//                   makes none above packages on ordinary servers, so 1.
//   SocketsPerBoard packages holding a core (physical_package_id).
//   CoresPerSocket  cores (distinct core_cpus_list, else thread_siblings_list,
//                   else package:core_id) / sockets.
//   ThreadsPerCore  CPUs / cores.
//   RealMemory      (uint64)((float)_SC_PHYS_PAGES * (page size / 1048576.0)):
//                   MemTotal of /proc/meminfo in MiB, rounded down, with the
//                   float rounding of the page count kept.
//   Gres            gpu:<type>:<n> per GPU model, <type> being NVML's device
//                   name lower-cased with spaces turned into '_' (the
//                   gpu/nvml plugin: "NVIDIA H100 80GB HBM3" ->
//                   "nvidia_h100_80gb_hbm3").
// Without /sys topology (some containers) the CPU fields come from
// /proc/cpuinfo ("processor", "physical id", "core id").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/system_root.h"

namespace dtrain::gpu {
class Nvml;
}

namespace dtrain::doctor {

struct CpuTopology {
  int cpus = 0;
  int boards = 1;
  int sockets = 0;  // per board
  int cores_per_socket = 0;
  int threads_per_core = 0;
};

struct SlurmGpu {
  std::string type;    // Slurm's gres type: "nvidia_h100_80gb_hbm3"
  unsigned minor = 0;  // N of /dev/nvidiaN
};

struct SlurmNode {
  std::string name;
  CpuTopology cpu;
  uint64_t real_memory_mib = 0;
  std::vector<SlurmGpu> gpus;  // in NVML order
  std::string no_gpu_reason;   // why gpus is empty: NVML's error, or "NVML lists no GPUs"
};

// The short host name. Throws ConfigError naming the file when the root has
// no /proc/sys/kernel/hostname (the live system falls back to gethostname).
std::string readShortHostName(const SystemRoot& root);

// Throws ConfigError naming the files tried when neither
// /sys/devices/system/cpu nor /proc/cpuinfo describe a CPU.
CpuTopology readCpuTopology(const SystemRoot& root);

// Throws ConfigError naming /proc/meminfo when it has no MemTotal line.
uint64_t readRealMemoryMiB(const SystemRoot& root);

// "NVIDIA H100 80GB HBM3" -> "nvidia_h100_80gb_hbm3", as the gpu/nvml plugin.
std::string slurmGresType(const std::string& nvml_device_name);

// The GPUs NVML lists. A GPU whose name or minor number NVML does not give
// throws IoError naming it: Slurm could not bind it either.
std::vector<SlurmGpu> readSlurmGpus(gpu::Nvml& nvml);

// Reads the node; with use_nvml, opens NVML (DTRAIN_NVML_LIBRARY, else
// libnvidia-ml.so.1) and an NVML that cannot be opened leaves gpus empty with
// the reason.
SlurmNode describeSlurmNode(const SystemRoot& root, bool use_nvml);

// "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2
//  ThreadsPerCore=1 RealMemory=24105[ Gres=gpu:nvidia_h100_80gb_hbm3:8]"
std::string slurmNodeLine(const SlurmNode& node);

// The gres.conf lines. Without GPUs one comment line saying none were found
// and why. Else "AutoDetect=nvml", or with device_files one line per GPU type:
// "NodeName=<host> Name=gpu Type=<type> File=/dev/nvidia[0-3]".
std::vector<std::string> gresConfLines(const SlurmNode& node, bool device_files);

// "/dev/nvidia0" for {0}; "/dev/nvidia[0-3,6]" for {0,1,2,3,6} (sorted).
std::string nvidiaDeviceFiles(std::vector<unsigned> minors);

}  // namespace dtrain::doctor
