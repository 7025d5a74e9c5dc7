// Nvml's GPU Performance Monitoring calls (nvml.h): the profiling counters
// behind dcgm-exporter's DCGM_FI_PROF_* metrics, read without DCGM.
#include <algorithm>
#include <climits>
#include <memory>
#include <string>
#include <utility>

#include "common/log.h"
#include "gpu/nvml.h"
#include "gpu/nvml_functions.h"

namespace dtrain::gpu {

using namespace nvml_abi;

NvmlGpmSample::NvmlGpmSample(NvmlGpmSample&& other) noexcept
    : free_(other.free_), handle_(std::exchange(other.handle_, nullptr)) {}

NvmlGpmSample& NvmlGpmSample::operator=(NvmlGpmSample&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr && free_ != nullptr) free_(handle_);
    free_ = other.free_;
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

NvmlGpmSample::~NvmlGpmSample() {
  if (handle_ != nullptr && free_ != nullptr) free_(handle_);
}

bool Nvml::gpmSupported(unsigned gpu) {
  if (fn_->nvmlGpmQueryDeviceSupport == nullptr || fn_->nvmlGpmSampleAlloc == nullptr ||
      fn_->nvmlGpmSampleFree == nullptr || fn_->nvmlGpmSampleGet == nullptr || fn_->nvmlGpmMetricsGet == nullptr) {
    return false;
  }
  nvmlGpmSupport_t support{};
  support.version = NVML_GPM_SUPPORT_VERSION;
  if (!readable(fn_->nvmlGpmQueryDeviceSupport(device(gpu), &support), "nvmlGpmQueryDeviceSupport", gpu)) {
    return false;
  }
  return support.isSupportedDevice != 0;
}

std::optional<NvmlGpmSample> Nvml::gpmAllocSample() {
  if (fn_->nvmlGpmSampleAlloc == nullptr || fn_->nvmlGpmSampleFree == nullptr) return std::nullopt;
  NvmlGpmSample sample;
  sample.free_ = fn_->nvmlGpmSampleFree;
  if (!readable(fn_->nvmlGpmSampleAlloc(&sample.handle_), "nvmlGpmSampleAlloc", UINT_MAX)) {
    sample.handle_ = nullptr;
    return std::nullopt;
  }
  return sample;
}

bool Nvml::gpmTakeSample(unsigned gpu, NvmlGpmSample& sample) {
  if (fn_->nvmlGpmSampleGet == nullptr || sample.empty()) return false;
  return readable(fn_->nvmlGpmSampleGet(device(gpu), sample.handle_), "nvmlGpmSampleGet", gpu);
}

std::vector<std::optional<double>> Nvml::gpmMetrics(unsigned gpu, const NvmlGpmSample& earlier,
                                                    const NvmlGpmSample& later,
                                                    const std::vector<unsigned>& metric_ids) {
  std::vector<std::optional<double>> out(metric_ids.size());
  if (fn_->nvmlGpmMetricsGet == nullptr || earlier.empty() || later.empty() || metric_ids.empty()) return out;
  // About 13 KiB: on the heap, not on the collection thread's stack.
  auto request = std::make_unique<nvmlGpmMetricsGet_t>();
  request->version = NVML_GPM_METRICS_GET_VERSION;
  request->numMetrics = static_cast<unsigned>(std::min<size_t>(metric_ids.size(), kNvmlGpmMetricsCapacity));
  request->sample1 = earlier.handle_;
  request->sample2 = later.handle_;
  for (unsigned i = 0; i < request->numMetrics; ++i) request->metrics[i].metricId = metric_ids[i];
  if (!readable(fn_->nvmlGpmMetricsGet(request.get()), "nvmlGpmMetricsGet", gpu)) return out;
  for (unsigned i = 0; i < request->numMetrics; ++i) {
    const nvmlGpmMetric_t& metric = request->metrics[i];
    std::string call = "nvmlGpmMetricsGet(metric " + std::to_string(metric.metricId) + ")";
    if (readable(metric.nvmlReturn, call.c_str(), gpu)) out[i] = metric.value;
  }
  return out;
}

}  // namespace dtrain::gpu
