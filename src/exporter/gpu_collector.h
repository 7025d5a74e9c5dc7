// One reading of every GPU through NVML, in dcgm-exporter's units: the fields
// behind the DCGM_FI_DEV_* metrics (gpu_metrics.h) and the live page's JSON.
// A field NVML cannot give (missing function, NOT_SUPPORTED, error) is
// std::nullopt, never a sentinel.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "exporter/nvml.h"

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
};

class GpuCollector {
 public:
  // Reads the GPUs' identities and registers them for Xid events.
  explicit GpuCollector(Nvml& nvml);

  // Reads every GPU once, after draining the Xid events queued since the
  // last call.
  std::vector<GpuSample> collect();

  const std::vector<GpuIdentity>& gpus() const { return gpus_; }

 private:
  struct XidState {
    bool watched = false;
    uint64_t last = 0;
    std::map<uint64_t, uint64_t> counts;
  };

  Nvml& nvml_;
  std::vector<GpuIdentity> gpus_;
  std::map<unsigned, XidState> xid_;  // by NVML index
};

}  // namespace dtrain::exporter
