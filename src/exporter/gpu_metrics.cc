#include "exporter/gpu_metrics.h"

#include <unistd.h>

#include <optional>

#include "common/host.h"
#include "common/env.h"

namespace dtrain::exporter {
namespace {

using gpu::nvml_abi::kClocksEventApplicationsClocksSetting;
using gpu::nvml_abi::kClocksEventDisplayClockSetting;
using gpu::nvml_abi::kClocksEventGpuIdle;
using gpu::nvml_abi::kClocksEventHwPowerBrakeSlowdown;
using gpu::nvml_abi::kClocksEventHwSlowdown;
using gpu::nvml_abi::kClocksEventHwThermalSlowdown;
using gpu::nvml_abi::kClocksEventSwPowerCap;
using gpu::nvml_abi::kClocksEventSwThermalSlowdown;
using gpu::nvml_abi::kClocksEventSyncBoost;

constexpr const char* kClockEventActive = "dtrain_gpu_clock_event_active";
constexpr const char* kXidEvents = "dtrain_gpu_xid_events_total";

// A metric whose value is one field of GpuSample. The help texts are
// dcgm-exporter's where it has the metric.
struct FieldMetric {
  const char* name;
  metrics::MetricType type;
  const char* help;
  std::optional<double> GpuSample::*field;
};

const std::vector<FieldMetric>& fieldMetrics() {
  static const std::vector<FieldMetric> metrics = {
      {"DCGM_FI_DEV_GPU_UTIL", metrics::MetricType::kGauge, "GPU utilization (in %).", &GpuSample::gpu_util},
      {"DCGM_FI_DEV_MEM_COPY_UTIL", metrics::MetricType::kGauge, "Memory utilization (in %).", &GpuSample::mem_copy_util},
      {"DCGM_FI_DEV_FB_USED", metrics::MetricType::kGauge, "Framebuffer memory used (in MiB).", &GpuSample::fb_used_mib},
      {"DCGM_FI_DEV_FB_FREE", metrics::MetricType::kGauge, "Framebuffer memory free (in MiB).", &GpuSample::fb_free_mib},
      {"DCGM_FI_DEV_FB_TOTAL", metrics::MetricType::kGauge, "Framebuffer memory total (in MiB).", &GpuSample::fb_total_mib},
      {"DCGM_FI_DEV_GPU_TEMP", metrics::MetricType::kGauge, "GPU temperature (in C).", &GpuSample::gpu_temp_c},
      {"DCGM_FI_DEV_MEMORY_TEMP", metrics::MetricType::kGauge, "Memory temperature (in C).", &GpuSample::memory_temp_c},
      {"DCGM_FI_DEV_POWER_USAGE", metrics::MetricType::kGauge, "Power draw (in W).", &GpuSample::power_w},
      {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", metrics::MetricType::kCounter,
       "Total energy consumption since boot (in mJ).", &GpuSample::energy_mj},
      {"DCGM_FI_DEV_SM_CLOCK", metrics::MetricType::kGauge, "SM clock frequency (in MHz).", &GpuSample::sm_clock_mhz},
      {"DCGM_FI_DEV_MEM_CLOCK", metrics::MetricType::kGauge, "Memory clock frequency (in MHz).", &GpuSample::mem_clock_mhz},
      {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", metrics::MetricType::kGauge,
       "Current clock throttle reasons (NVML bitmask; decoded in dtrain_gpu_clock_event_active).",
       &GpuSample::clock_event_reasons},
      {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", metrics::MetricType::kCounter, "Total number of PCIe retries.",
       &GpuSample::pcie_replays},
      {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", metrics::MetricType::kCounter,
       "Total number of double-bit volatile ECC errors.", &GpuSample::ecc_dbe_volatile},
      {"DCGM_FI_DEV_ROW_REMAP_PENDING", metrics::MetricType::kGauge,
       "Whether remapping of rows is pending (1 = a GPU reset is needed).", &GpuSample::row_remap_pending},
      {"DCGM_FI_DEV_ROW_REMAP_FAILURE", metrics::MetricType::kGauge, "Whether remapping of rows has failed.",
       &GpuSample::row_remap_failure},
      {"DCGM_FI_DEV_XID_ERRORS", metrics::MetricType::kGauge, "Value of the last XID error encountered.",
       &GpuSample::last_xid},
      // Profiling metrics from NVML GPM, averaged over the collection interval.
      {"DCGM_FI_PROF_SM_ACTIVE", metrics::MetricType::kGauge,
       "The ratio of cycles an SM has at least 1 warp assigned (NVML GPM SM utilization, 0..1).",
       &GpuSample::sm_active},
      {"DCGM_FI_PROF_SM_OCCUPANCY", metrics::MetricType::kGauge,
       "The ratio of resident warps to the maximum an SM can hold (0..1).", &GpuSample::sm_occupancy},
      {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", metrics::MetricType::kGauge,
       "Ratio of cycles any tensor pipe is active (0..1).", &GpuSample::tensor_active},
      {"DCGM_FI_PROF_DRAM_ACTIVE", metrics::MetricType::kGauge,
       "Ratio of the device memory bandwidth in use to its peak (0..1).", &GpuSample::dram_active},
      {"DCGM_FI_PROF_PCIE_TX_BYTES", metrics::MetricType::kGauge,
       "The rate of data transmitted over the PCIe bus, in bytes per second.", &GpuSample::pcie_tx_bytes_per_s},
      {"DCGM_FI_PROF_PCIE_RX_BYTES", metrics::MetricType::kGauge,
       "The rate of data received over the PCIe bus, in bytes per second.", &GpuSample::pcie_rx_bytes_per_s},
      {"DCGM_FI_PROF_NVLINK_TX_BYTES", metrics::MetricType::kGauge,
       "The rate of data transmitted over all NVLinks, in bytes per second.", &GpuSample::nvlink_tx_bytes_per_s},
      {"DCGM_FI_PROF_NVLINK_RX_BYTES", metrics::MetricType::kGauge,
       "The rate of data received over all NVLinks, in bytes per second.", &GpuSample::nvlink_rx_bytes_per_s},
      {"dtrain_gpu_nvlink_tx_bytes_total", metrics::MetricType::kCounter,
       "NVLink data bytes transmitted over all links since the driver loaded (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX).",
       &GpuSample::nvlink_tx_bytes},
      {"dtrain_gpu_nvlink_rx_bytes_total", metrics::MetricType::kCounter,
       "NVLink data bytes received over all links since the driver loaded (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX).",
       &GpuSample::nvlink_rx_bytes},
  };
  return metrics;
}

metrics::Labels gpuLabels(const GpuIdentity& id, const metrics::Labels& host_labels) {
  metrics::Labels labels = {{"gpu", std::to_string(id.gpu)},
                   {"UUID", id.uuid},
                   {"pci_bus_id", id.pci_bus_id},
                   {"device", id.device},
                   {"modelName", id.model}};
  labels.insert(labels.end(), host_labels.begin(), host_labels.end());
  return labels;
}

// The label sets of one GPU's series: its own labels, and per owner of its
// processes a copy with hpc_job and/or pod_uid (dcgm-exporter repeats a
// series per job the same way).
std::vector<metrics::Labels> ownerLabelSets(const metrics::Labels& labels, const std::vector<GpuOwner>& owners) {
  if (owners.empty()) return {labels};
  std::vector<metrics::Labels> sets;
  for (const GpuOwner& owner : owners) {
    metrics::Labels with_owner = labels;
    if (!owner.hpc_job.empty()) with_owner.emplace_back("hpc_job", owner.hpc_job);
    if (!owner.pod_uid.empty()) with_owner.emplace_back("pod_uid", owner.pod_uid);
    sets.push_back(std::move(with_owner));
  }
  return sets;
}

}  // namespace

const std::vector<ClockEventReason>& clockEventReasons() {
  static const std::vector<ClockEventReason> reasons = {
      {"gpu_idle", kClocksEventGpuIdle},
      {"applications_clocks_setting", kClocksEventApplicationsClocksSetting},
      {"sw_power_cap", kClocksEventSwPowerCap},
      {"hw_slowdown", kClocksEventHwSlowdown},
      {"sync_boost", kClocksEventSyncBoost},
      {"sw_thermal_slowdown", kClocksEventSwThermalSlowdown},
      {"hw_thermal_slowdown", kClocksEventHwThermalSlowdown},
      {"hw_power_brake_slowdown", kClocksEventHwPowerBrakeSlowdown},
      {"display_clock_setting", kClocksEventDisplayClockSetting},
  };
  return reasons;
}

std::vector<std::string> activeClockEventReasons(unsigned long long mask) {
  std::vector<std::string> active;
  for (const ClockEventReason& reason : clockEventReasons()) {
    if ((mask & reason.bit) != 0) active.emplace_back(reason.label);
  }
  return active;
}

const std::vector<MetricInfo>& gpuMetricCatalog() {
  static const std::vector<MetricInfo> catalog = [] {
    std::vector<MetricInfo> out;
    for (const FieldMetric& m : fieldMetrics()) out.push_back(MetricInfo{m.name, m.help, m.type});
    out.push_back(MetricInfo{kClockEventActive,
                             "1 while the clock-event (throttle) reason in the reason label holds the GPU's clocks "
                             "down, else 0; decoded from DCGM_FI_DEV_CLOCK_THROTTLE_REASONS.",
                             metrics::MetricType::kGauge});
    out.push_back(MetricInfo{kXidEvents,
                             "Xid critical errors NVML reported for the GPU since the exporter started, by Xid.",
                             metrics::MetricType::kCounter});
    return out;
  }();
  return catalog;
}

metrics::Labels hostLabels() {
  std::string host = envString("NODE_NAME").value_or("");
  if (host.empty()) host = hostName();
  metrics::Labels labels = {{"Hostname", host}};
  if (auto job = envString("SLURM_JOB_ID"); job && !job->empty()) labels.emplace_back("slurm_job_id", *job);
  return labels;
}

std::vector<metrics::MetricFamily> gpuMetricFamilies(const std::vector<GpuSample>& samples, const metrics::Labels& host_labels) {
  std::vector<metrics::MetricFamily> families;
  for (const MetricInfo& info : gpuMetricCatalog()) families.emplace_back(info.name, info.help, info.type);
  const std::vector<FieldMetric>& fields = fieldMetrics();
  metrics::MetricFamily& clock_events = families[fields.size()];
  metrics::MetricFamily& xid_events = families[fields.size() + 1];
  for (const GpuSample& sample : samples) {
    for (const metrics::Labels& labels : ownerLabelSets(gpuLabels(sample.id, host_labels), sample.owners)) {
      for (size_t i = 0; i < fields.size(); ++i) {
        if (const std::optional<double>& value = sample.*fields[i].field) families[i].add(labels, *value);
      }
      if (sample.clock_event_reasons) {
        auto mask = static_cast<unsigned long long>(*sample.clock_event_reasons);
        for (const ClockEventReason& reason : clockEventReasons()) {
          metrics::Labels with_reason = labels;
          with_reason.emplace_back("reason", reason.label);
          clock_events.add(std::move(with_reason), (mask & reason.bit) != 0 ? 1 : 0);
        }
      }
      for (const auto& [xid, count] : sample.xid_counts) {
        metrics::Labels with_xid = labels;
        with_xid.emplace_back("xid", std::to_string(xid));
        xid_events.add(std::move(with_xid), static_cast<double>(count));
      }
    }
  }
  return families;
}

}  // namespace dtrain::exporter
