// GPU activity from NVML's GPU Performance Monitoring (GPM, Hopper and
// later): the counters behind dcgm-exporter's DCGM_FI_PROF_* metrics. GPM
// gives a metric over the interval between two samples, so the sampler keeps
// the previous sample of every GPU and each read() covers the time since the
// last one: the exporter's own collection cadence, never a scrape.
#pragma once

#include <chrono>
#include <map>
#include <optional>

#include "gpu/nvml.h"

namespace dtrain::exporter {

// In dcgm-exporter's units: ratios 0..1 and bytes per second.
struct GpuActivity {
  std::optional<double> sm_active;      // NVML_GPM_METRIC_SM_UTIL
  std::optional<double> sm_occupancy;   // NVML_GPM_METRIC_SM_OCCUPANCY
  std::optional<double> tensor_active;  // NVML_GPM_METRIC_ANY_TENSOR_UTIL
  std::optional<double> dram_active;    // NVML_GPM_METRIC_DRAM_BW_UTIL
  std::optional<double> pcie_tx_bytes_per_s;
  std::optional<double> pcie_rx_bytes_per_s;
  std::optional<double> nvlink_tx_bytes_per_s;  // all links
  std::optional<double> nvlink_rx_bytes_per_s;
};

class GpuActivitySampler {
 public:
  // NVML wants the two samples of a metric more than 100 ms apart.
  static constexpr std::chrono::milliseconds kMinWindow{120};

  // Takes the first sample of every GPU that has GPM; says once, at info
  // level, which GPUs have none (their DCGM_FI_PROF_* series are left out).
  GpuActivitySampler(gpu::Nvml& nvml, const std::vector<unsigned>& gpus);

  bool supported(unsigned gpu) const { return gpus_.count(gpu) == 1; }

  // The activity since the last read (or since construction). A read sooner
  // than kMinWindow after the last gives the last values again; the very
  // first read waits out the rest of the first window (at most kMinWindow),
  // so that one collection (`dtrain exporter --once`) has values. nullopt
  // for a GPU without GPM.
  std::optional<GpuActivity> read(unsigned gpu);

 private:
  struct State {
    gpu::NvmlGpmSample earlier, later;
    std::chrono::steady_clock::time_point earlier_time;
    std::optional<GpuActivity> last;
  };

  gpu::Nvml& nvml_;
  std::map<unsigned, State> gpus_;  // GPUs with GPM, by NVML index
};

}  // namespace dtrain::exporter
