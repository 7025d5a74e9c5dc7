// One reading of every GPU through NVML, in dcgm-exporter's units: the fields
// behind the DCGM_FI_DEV_* metrics (gpu_metrics.h) and the live page's JSON.
// A field NVML cannot give (missing function, NOT_SUPPORTED, error) is
// std::nullopt, never a sentinel.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/system_root.h"
#include "exporter/gpu_activity.h"
#include "exporter/gpu_owners.h"
#include "gpu/nvml.h"

namespace dtrain::exporter {

struct GpuIdentity {
  unsigned gpu = 0;         // NVML index
  std::string uuid;         // "GPU-…", empty when NVML did not say
  std::string model;        // "NVIDIA H100 80GB HBM3"
  std::string pci_bus_id;   // "00000000:3B:00.0"
  std::string device;       // "nvidia<minor>"
};

struct GpuSample {
  GpuIdentity id;
  int64_t time_ms = 0;  // Unix time of the reading

  std::optional<double> gpu_util;       // %
  std::optional<double> mem_copy_util;  // %
  std::optional<double> fb_used_mib;
  std::optional<double> fb_free_mib;
  std::optional<double> fb_total_mib;
  std::optional<double> gpu_temp_c;
  std::optional<double> memory_temp_c;
  std::optional<double> power_w;
  std::optional<double> energy_mj;      // since driver load
  std::optional<double> sm_clock_mhz;
  std::optional<double> mem_clock_mhz;
  std::optional<double> clock_event_reasons;  // NVML bitmask
  std::optional<double> pcie_replays;
  std::optional<double> ecc_dbe_volatile;     // uncorrected, since driver load
  std::optional<double> row_remap_pending;    // 0 or 1
  std::optional<double> row_remap_failure;    // 0 or 1
  std::optional<double> nvlink_tx_bytes;      // all links, since driver load
  std::optional<double> nvlink_rx_bytes;
  // Xid critical errors, when the GPU supports the events: the last one (0
  // before any, as DCGM) and a count per Xid since the exporter started.
  std::optional<double> last_xid;
  std::map<uint64_t, uint64_t> xid_counts;
  // GPM activity since the previous collection (gpu_activity.h): ratios
  // 0..1 and bytes/s; absent on a GPU without GPM.
  std::optional<double> sm_active;
  std::optional<double> sm_occupancy;
  std::optional<double> tensor_active;
  std::optional<double> dram_active;
  std::optional<double> pcie_tx_bytes_per_s;
  std::optional<double> pcie_rx_bytes_per_s;
  std::optional<double> nvlink_tx_bytes_per_s;
  std::optional<double> nvlink_rx_bytes_per_s;
  // The Slurm jobs and Kubernetes pods of the GPU's compute processes
  // (gpu_owners.h); empty when it runs none.
  std::vector<GpuOwner> owners;
};

class GpuCollector {
 public:
  // Reads the GPUs' identities, registers them for Xid events and takes
  // their first GPM sample. slow_refresh: see collect(). The owners of the
  // GPUs' processes are read from /proc under `root`.
  explicit GpuCollector(gpu::Nvml& nvml, std::chrono::milliseconds slow_refresh = std::chrono::seconds(10),
                        SystemRoot root = SystemRoot("/"));

  // Reads every GPU once, after draining the Xid events queued since the
  // last call. The slow readings are read at the first call and then at
  // most every slow_refresh (0: every call), the calls between reporting the last values
  // read: the energy counter (NVML spends ~4 ms of CPU per GPU on it, on
  // H200), the PCIe replay counter (~0.15 ms) and the health counters that
  // change rarely (uncorrected ECC, remapped rows). Every other reading
  // costs a few microseconds. The GPM activity covers the time since the
  // last call (GpuActivitySampler::read; the first call may wait up to
  // 120 ms for it).
  std::vector<GpuSample> collect();

  const std::vector<GpuIdentity>& gpus() const { return gpus_; }

 private:
  struct XidState {
    bool watched = false;
    uint64_t last = 0;
    std::map<uint64_t, uint64_t> counts;
  };

  struct Health {
    std::optional<double> energy_mj, pcie_replays, ecc_dbe_volatile, row_remap_pending, row_remap_failure;
  };

  gpu::Nvml& nvml_;
  std::chrono::milliseconds slow_refresh_;
  std::vector<GpuIdentity> gpus_;
  std::map<unsigned, XidState> xid_;  // by NVML index
  std::map<unsigned, Health> health_;  // by NVML index, the last read
  std::optional<std::chrono::steady_clock::time_point> health_read_;
  std::unique_ptr<GpuActivitySampler> activity_;
  SystemRoot root_;
};

// Milliseconds since the Unix epoch, now (the samples' timestamps).
int64_t unixMillis();

}  // namespace dtrain::exporter
