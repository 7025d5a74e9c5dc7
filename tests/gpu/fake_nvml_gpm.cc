// The GPM part of the fake libnvidia-ml (fake_nvml.cc): GPU 0 supports GPU
// Performance Monitoring and answers fixed metrics (fake_nvml_values.h);
// GPU 1 does not. Like the real library, a metric needs two samples of the
// same GPU, the later one taken more than 100 ms after the earlier.
#include <chrono>
#include <cstring>
#include <optional>

#include "fake_nvml_values.h"
#include "gpu/nvml_abi.h"

namespace dtrain::gpu::nvml_abi {
struct nvmlDevice_st {
  unsigned index;
};
struct nvmlGpmSample_st {
  bool taken = false;
  unsigned gpu = 0;
  std::chrono::steady_clock::time_point time;
};
}  // namespace dtrain::gpu::nvml_abi

using namespace dtrain::gpu::nvml_abi;
namespace fake = dtrain::testing::fake_nvml;

namespace {

bool gpmDevice(nvmlDevice_t device) { return device != nullptr && device->index == 0; }

std::optional<double> metricValue(unsigned id) {
  switch (id) {
    case NVML_GPM_METRIC_SM_UTIL: return fake::kGpmSmUtil0;
    case NVML_GPM_METRIC_SM_OCCUPANCY: return fake::kGpmSmOccupancy0;
    case NVML_GPM_METRIC_ANY_TENSOR_UTIL: return fake::kGpmAnyTensorUtil0;
    case NVML_GPM_METRIC_DRAM_BW_UTIL: return fake::kGpmDramBwUtil0;
    case NVML_GPM_METRIC_PCIE_TX_PER_SEC: return fake::kGpmPcieTxMiBps0;
    case NVML_GPM_METRIC_PCIE_RX_PER_SEC: return fake::kGpmPcieRxMiBps0;
    case NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: return fake::kGpmNvlinkTxMiBps0;
    case NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: return fake::kGpmNvlinkRxMiBps0;
    default: return std::nullopt;
  }
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t* support) {
  if (device == nullptr || support == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (support->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  support->isSupportedDevice = gpmDevice(device) ? 1 : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t* sample) {
  if (sample == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *sample = new nvmlGpmSample_st();
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
  delete sample;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
  if (device == nullptr || sample == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!gpmDevice(device)) return NVML_ERROR_NOT_SUPPORTED;
  sample->taken = true;
  sample->gpu = device->index;
  sample->time = std::chrono::steady_clock::now();
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t* request) {
  if (request == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (request->version != NVML_GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  const nvmlGpmSample_st* a = request->sample1;
  const nvmlGpmSample_st* b = request->sample2;
  if (a == nullptr || b == nullptr || !a->taken || !b->taken || a->gpu != b->gpu ||
      request->numMetrics > kNvmlGpmMetricsCapacity) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (b->time - a->time <= std::chrono::milliseconds(fake::kGpmMinWindowMs)) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned i = 0; i < request->numMetrics; ++i) {
    nvmlGpmMetric_t& metric = request->metrics[i];
    std::memset(&metric.metricInfo, 0, sizeof(metric.metricInfo));
    auto value = metricValue(metric.metricId);
    metric.nvmlReturn = value ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
    metric.value = value.value_or(0);
  }
  return NVML_SUCCESS;
}

}  // extern "C"
