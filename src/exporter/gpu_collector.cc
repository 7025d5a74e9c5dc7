#include "exporter/gpu_collector.h"

#include <chrono>
#include <utility>

#include "common/log.h"

namespace dtrain::exporter {
namespace {

namespace abi = gpu::nvml_abi;

constexpr double kMiB = 1024.0 * 1024.0;

template <typename T>
std::optional<double> asDouble(const std::optional<T>& value) {
  if (!value) return std::nullopt;
  return static_cast<double>(*value);
}

}  // namespace

int64_t unixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

GpuCollector::GpuCollector(gpu::Nvml& nvml, std::chrono::milliseconds slow_refresh, SystemRoot root)
    : nvml_(nvml), slow_refresh_(slow_refresh), root_(std::move(root)) {
  for (unsigned gpu : nvml_.gpus()) {
    GpuIdentity id;
    id.gpu = gpu;
    id.uuid = nvml_.uuid(gpu).value_or("");
    id.model = nvml_.name(gpu).value_or("");
    id.pci_bus_id = nvml_.pciBusId(gpu).value_or("");
    id.device = "nvidia" + std::to_string(nvml_.minorNumber(gpu).value_or(gpu));
    gpus_.push_back(id);
    xid_[gpu].watched = nvml_.watchXidEvents(gpu);
  }
  activity_ = std::make_unique<GpuActivitySampler>(nvml_, nvml_.gpus());
}

std::vector<GpuSample> GpuCollector::collect() {
  for (const gpu::NvmlXidEvent& event : nvml_.pollXidEvents()) {
    XidState& state = xid_[event.gpu];
    state.last = event.xid;
    ++state.counts[event.xid];
    DTRAIN_LOG_WARN("GPU " << event.gpu << ": Xid " << event.xid);
  }
  const auto now = std::chrono::steady_clock::now();
  const bool read_health = !health_read_ || now - *health_read_ >= slow_refresh_;
  if (read_health) health_read_ = now;
  std::vector<GpuSample> samples;
  samples.reserve(gpus_.size());
  for (const GpuIdentity& id : gpus_) {
    const unsigned gpu = id.gpu;
    GpuSample s;
    s.id = id;
    s.time_ms = unixMillis();
    if (auto util = nvml_.utilization(gpu)) {
      s.gpu_util = util->gpu;
      s.mem_copy_util = util->memory;
    }
    if (auto mem = nvml_.memory(gpu)) {
      // dcgm-exporter reports whole MiB.
      s.fb_used_mib = static_cast<double>(mem->used_bytes / static_cast<uint64_t>(kMiB));
      s.fb_free_mib = static_cast<double>(mem->free_bytes / static_cast<uint64_t>(kMiB));
      s.fb_total_mib = static_cast<double>(mem->total_bytes / static_cast<uint64_t>(kMiB));
    }
    s.gpu_temp_c = asDouble(nvml_.temperatureC(gpu));
    if (auto mw = nvml_.powerUsageMilliwatts(gpu)) s.power_w = *mw / 1000.0;
    s.sm_clock_mhz = asDouble(nvml_.clockMhz(gpu, abi::NVML_CLOCK_SM));
    s.mem_clock_mhz = asDouble(nvml_.clockMhz(gpu, abi::NVML_CLOCK_MEM));
    s.clock_event_reasons = asDouble(nvml_.clockEventReasons(gpu));
    Health& health = health_[gpu];
    if (read_health) {
      health.energy_mj = asDouble(nvml_.totalEnergyMillijoules(gpu));
      health.pcie_replays = asDouble(nvml_.pcieReplayCounter(gpu));
      health.ecc_dbe_volatile = asDouble(nvml_.eccUncorrectedVolatile(gpu));
      health.row_remap_pending.reset();
      health.row_remap_failure.reset();
      if (auto rows = nvml_.remappedRows(gpu)) {
        health.row_remap_pending = rows->pending ? 1 : 0;
        health.row_remap_failure = rows->failure ? 1 : 0;
      }
    }
    s.energy_mj = health.energy_mj;
    s.pcie_replays = health.pcie_replays;
    s.ecc_dbe_volatile = health.ecc_dbe_volatile;
    s.row_remap_pending = health.row_remap_pending;
    s.row_remap_failure = health.row_remap_failure;
    auto fields = nvml_.fieldValues(gpu, {{abi::NVML_FI_DEV_MEMORY_TEMP, 0},
                                          {abi::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, abi::kNvmlScopeAllLinks},
                                          {abi::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, abi::kNvmlScopeAllLinks}});
    s.memory_temp_c = fields[0];
    // NVML counts NVLink data in KiB.
    if (fields[1]) s.nvlink_tx_bytes = *fields[1] * 1024.0;
    if (fields[2]) s.nvlink_rx_bytes = *fields[2] * 1024.0;
    const XidState& xid = xid_[gpu];
    if (xid.watched) {
      s.last_xid = static_cast<double>(xid.last);
      s.xid_counts = xid.counts;
    }
    if (auto activity = activity_->read(gpu)) {
      s.sm_active = activity->sm_active;
      s.sm_occupancy = activity->sm_occupancy;
      s.tensor_active = activity->tensor_active;
      s.dram_active = activity->dram_active;
      s.pcie_tx_bytes_per_s = activity->pcie_tx_bytes_per_s;
      s.pcie_rx_bytes_per_s = activity->pcie_rx_bytes_per_s;
      s.nvlink_tx_bytes_per_s = activity->nvlink_tx_bytes_per_s;
      s.nvlink_rx_bytes_per_s = activity->nvlink_rx_bytes_per_s;
    }
    if (auto processes = nvml_.computeProcesses(gpu)) s.owners = ownersOf(root_, *processes);
    samples.push_back(std::move(s));
  }
  return samples;
}

}  // namespace dtrain::exporter
