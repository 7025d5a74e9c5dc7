// The GPU metrics the exporter serves: dcgm-exporter's names, units and labels
// (gpu, UUID, pci_bus_id, device, modelName, Hostname; slurm_job_id when the
// exporter runs in a Slurm job; hpc_job and pod_uid, one series per owner,
// when the GPU runs processes of a Slurm job or a Kubernetes pod) so existing
// dashboards and alerts work unchanged, plus a few dtrain_gpu_* series that
// DCGM has no field for.
#pragma once

#include <string>
#include <vector>

#include "exporter/gpu_collector.h"
#include "metrics/prometheus_text.h"

namespace dtrain::exporter {

struct MetricInfo {
  std::string name;
  std::string help;
  metrics::MetricType type;
};

// Every GPU metric the exporter can export, in exposition order.
const std::vector<MetricInfo>& gpuMetricCatalog();

// Labels on every GPU series besides the GPU's own: Hostname (NODE_NAME when
// set, else the host name) and slurm_job_id when SLURM_JOB_ID is set.
metrics::Labels hostLabels();

// One family per catalog entry, with a sample per GPU that has the field.
std::vector<metrics::MetricFamily> gpuMetricFamilies(const std::vector<GpuSample>& samples, const metrics::Labels& host_labels);

// The clock-event reasons dtrain_gpu_clock_event_active decodes, by the
// label value it uses ("sw_power_cap", ...), and the names set in a mask.
struct ClockEventReason {
  const char* label;
  unsigned long long bit;
};
const std::vector<ClockEventReason>& clockEventReasons();
std::vector<std::string> activeClockEventReasons(unsigned long long mask);

}  // namespace dtrain::exporter
