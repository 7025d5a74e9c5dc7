#include "exporter/gpu_activity.h"

#include <thread>
#include <utility>

#include "common/log.h"

namespace dtrain::exporter {
namespace {

namespace abi = gpu::nvml_abi;

constexpr double kBytesPerMiB = 1024.0 * 1024.0;

// The order GpuActivity is filled in.
const std::vector<unsigned>& metricIds() {
  static const std::vector<unsigned> ids = {
      abi::NVML_GPM_METRIC_SM_UTIL,         abi::NVML_GPM_METRIC_SM_OCCUPANCY,
      abi::NVML_GPM_METRIC_ANY_TENSOR_UTIL, abi::NVML_GPM_METRIC_DRAM_BW_UTIL,
      abi::NVML_GPM_METRIC_PCIE_TX_PER_SEC, abi::NVML_GPM_METRIC_PCIE_RX_PER_SEC,
      abi::NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, abi::NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
  };
  return ids;
}

std::optional<double> ratio(const std::optional<double>& percent) {
  if (!percent) return std::nullopt;
  return *percent / 100.0;
}

std::optional<double> bytesPerSecond(const std::optional<double>& mib_per_s) {
  if (!mib_per_s) return std::nullopt;
  return *mib_per_s * kBytesPerMiB;
}

GpuActivity activityOf(const std::vector<std::optional<double>>& v) {
  GpuActivity a;
  // NVML gives percentages and MiB/s; DCGM ratios and bytes/s.
  a.sm_active = ratio(v[0]);
  a.sm_occupancy = ratio(v[1]);
  a.tensor_active = ratio(v[2]);
  a.dram_active = ratio(v[3]);
  a.pcie_tx_bytes_per_s = bytesPerSecond(v[4]);
  a.pcie_rx_bytes_per_s = bytesPerSecond(v[5]);
  a.nvlink_tx_bytes_per_s = bytesPerSecond(v[6]);
  a.nvlink_rx_bytes_per_s = bytesPerSecond(v[7]);
  return a;
}

}  // namespace

GpuActivitySampler::GpuActivitySampler(gpu::Nvml& nvml, const std::vector<unsigned>& gpus) : nvml_(nvml) {
  for (unsigned gpu : gpus) {
    std::optional<gpu::NvmlGpmSample> earlier, later;
    if (nvml_.gpmSupported(gpu)) {
      earlier = nvml_.gpmAllocSample();
      later = nvml_.gpmAllocSample();
    }
    if (!earlier || !later || !nvml_.gpmTakeSample(gpu, *earlier)) {
      DTRAIN_LOG_INFO("GPU " << gpu << ": no GPU Performance Monitoring (NVML GPM needs a Hopper or later GPU and a "
                             "driver from R520 on); its DCGM_FI_PROF_* metrics are left out");
      continue;
    }
    State& state = gpus_[gpu];
    state.earlier = std::move(*earlier);
    state.later = std::move(*later);
    state.earlier_time = std::chrono::steady_clock::now();
  }
}

std::optional<GpuActivity> GpuActivitySampler::read(unsigned gpu) {
  auto it = gpus_.find(gpu);
  if (it == gpus_.end()) return std::nullopt;
  State& state = it->second;
  auto window = std::chrono::steady_clock::now() - state.earlier_time;
  if (window < kMinWindow) {
    if (state.last) return state.last;
    std::this_thread::sleep_for(kMinWindow - window);
  }
  const auto now = std::chrono::steady_clock::now();
  if (!nvml_.gpmTakeSample(gpu, state.later)) {
    state.last.reset();  // stale values would read as current
    return std::nullopt;
  }
  state.last = activityOf(nvml_.gpmMetrics(gpu, state.earlier, state.later, metricIds()));
  std::swap(state.earlier, state.later);
  state.earlier_time = now;
  return state.last;
}

}  // namespace dtrain::exporter
