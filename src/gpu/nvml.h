// NVML, opened at run time with dlopen: dtrain builds and runs on machines
// without the NVIDIA driver, and the exporter serves there without GPU
// metrics. The library is DTRAIN_NVML_LIBRARY, else libnvidia-ml.so.1.
//
// Contract of the readings: a reading is std::nullopt when the library lacks
// the function (an older driver) or the GPU answers NVML_ERROR_NOT_SUPPORTED;
// it is never replaced by a sentinel value. Any other failure (no permission,
// GPU lost) is also nullopt and is logged once per call and GPU. Calls that
// must succeed (init, device count, handles) throw IoError through
// DTRAIN_NVML_CHECK, naming the call, the code and NVML's own string.
//
// NVML is thread-safe; an Nvml object is too.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gpu/nvml_abi.h"

namespace dtrain::gpu {

// The library dlopen opens: DTRAIN_NVML_LIBRARY, else "libnvidia-ml.so.1".
std::string nvmlLibraryName();

struct NvmlMemory {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t used_bytes = 0;
};

struct NvmlRemappedRows {
  unsigned corrected = 0;
  unsigned uncorrected = 0;
  bool pending = false;
  bool failure = false;
};

struct NvmlXidEvent {
  unsigned gpu = 0;  // NVML device index
  uint64_t xid = 0;
};

// One nvmlDeviceGetFieldValues request: a field id and its scope (the NVLink
// link, or kNvmlScopeAllLinks).
struct NvmlFieldRequest {
  unsigned field_id = 0;
  unsigned scope_id = 0;
};

// NVSwitch fabric registration of one GPU (nvmlDeviceGetGpuFabricInfoV,
// else nvmlDeviceGetGpuFabricInfo).
struct NvmlFabricInfo {
  unsigned char state = 0;  // NVML_GPU_FABRIC_STATE_*
  int status = 0;           // an nvmlReturn_t; meaningful once state is COMPLETED
  unsigned clique_id = 0;
  std::string cluster_uuid;  // "a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf"
  std::optional<unsigned> health_mask;  // v2 only
};

struct NvmlProcess {
  unsigned pid = 0;
  std::optional<uint64_t> used_bytes;  // nullopt: NVML_VALUE_NOT_AVAILABLE
};

// One GPM sample buffer (nvmlGpmSampleAlloc), freed when destroyed; it must
// not outlive the Nvml that allocated it. Empty when default-constructed.
class NvmlGpmSample {
 public:
  NvmlGpmSample() = default;
  NvmlGpmSample(NvmlGpmSample&& other) noexcept;
  NvmlGpmSample& operator=(NvmlGpmSample&& other) noexcept;
  ~NvmlGpmSample();

  bool empty() const { return handle_ == nullptr; }

 private:
  friend class Nvml;
  nvml_abi::GpmSampleFreeFn free_ = nullptr;
  nvml_abi::nvmlGpmSample_t handle_ = nullptr;
};

class Nvml {
 public:
  // dlopen + nvmlInit_v2 + device enumeration. Throws IoError
  // "NVML not available: <dlerror() or NVML's error>".
  static std::unique_ptr<Nvml> open();
  ~Nvml();  // nvmlShutdown, dlclose
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  const std::string& libraryName() const { return library_name_; }
  // NVML indices of the GPUs whose handle NVML gave (a GPU that failed is
  // skipped with a warning).
  const std::vector<unsigned>& gpus() const { return gpu_indices_; }

  std::optional<std::string> uuid(unsigned gpu);
  std::optional<std::string> name(unsigned gpu);
  std::optional<std::string> pciBusId(unsigned gpu);  // "00000000:3B:00.0"
  std::optional<unsigned> minorNumber(unsigned gpu);  // N of /dev/nvidiaN

  std::optional<nvml_abi::nvmlUtilization_t> utilization(unsigned gpu);
  std::optional<NvmlMemory> memory(unsigned gpu);  // _v2 (used excludes reserved), else v1
  std::optional<unsigned> temperatureC(unsigned gpu);
  std::optional<unsigned> powerUsageMilliwatts(unsigned gpu);
  std::optional<uint64_t> totalEnergyMillijoules(unsigned gpu);
  std::optional<unsigned> clockMhz(unsigned gpu, int clock_type);  // NVML_CLOCK_SM / _MEM
  // nvmlDeviceGetCurrentClocksEventReasons, else ...ClocksThrottleReasons.
  std::optional<uint64_t> clockEventReasons(unsigned gpu);
  std::optional<unsigned> pcieReplayCounter(unsigned gpu);
  std::optional<uint64_t> eccUncorrectedVolatile(unsigned gpu);
  std::optional<NvmlRemappedRows> remappedRows(unsigned gpu);
  // One value per request, in order; nullopt where that field failed.
  std::vector<std::optional<double>> fieldValues(unsigned gpu, const std::vector<NvmlFieldRequest>& requests);

  // The system: driver version ("580.95.05"), NVML version ("12.580.95.05"),
  // and the CUDA version the driver supports (13000 for 13.0).
  std::optional<std::string> driverVersion();
  std::optional<std::string> nvmlVersion();
  std::optional<int> cudaDriverVersion();

  std::optional<bool> persistenceMode(unsigned gpu);
  // PCIe link: current and maximum generation and width. The maximum
  // generation is the GPU's own (nvmlDeviceGetGpuMaxPcieLinkGeneration), else
  // that of the GPU and the slot together (nvmlDeviceGetMaxPcieLinkGeneration).
  std::optional<unsigned> pcieLinkGeneration(unsigned gpu);
  std::optional<unsigned> pcieMaxLinkGeneration(unsigned gpu);
  std::optional<unsigned> pcieLinkWidth(unsigned gpu);
  std::optional<unsigned> pcieMaxLinkWidth(unsigned gpu);

  // NVLink `link` (0..NVML_NVLINK_MAX_LINKS-1): active or not; nullopt when
  // the GPU has no NVLink or no such link.
  std::optional<bool> nvLinkActive(unsigned gpu, unsigned link);
  std::optional<int> nvLinkRemoteDeviceType(unsigned gpu, unsigned link);  // NVML_NVLINK_DEVICE_TYPE_*
  std::optional<std::string> nvLinkRemotePciBusId(unsigned gpu, unsigned link);
  // Two GPUs: their closest common ancestor (NVML_TOPOLOGY_*) and their P2P
  // status (NVML_P2P_STATUS_*) for a capability (NVML_P2P_CAPS_INDEX_*).
  std::optional<int> topologyCommonAncestor(unsigned gpu_a, unsigned gpu_b);
  std::optional<int> p2pStatus(unsigned gpu_a, unsigned gpu_b, int caps_index);

  std::optional<NvmlFabricInfo> fabricInfo(unsigned gpu);
  // Compute processes on the GPU (_v3, else _v2).
  std::optional<std::vector<NvmlProcess>> computeProcesses(unsigned gpu);

  // GPU Performance Monitoring (nvml_gpm.cc). gpmSupported: the GPU has GPM
  // (nvmlGpmQueryDeviceSupport; Hopper and later); false also when the
  // library lacks the GPM functions (a driver older than R520).
  bool gpmSupported(unsigned gpu);
  // A sample buffer; nullopt without GPM functions or when NVML refuses.
  std::optional<NvmlGpmSample> gpmAllocSample();
  // Reads the GPU's counters into `sample`; false on failure (logged once).
  bool gpmTakeSample(unsigned gpu, NvmlGpmSample& sample);
  // The metrics (NVML_GPM_METRIC_*) over the interval between two samples of
  // one GPU, taken more than 100 ms apart: one value per id, in NVML's units
  // (percent, MiB/s), nullopt where NVML failed for that metric.
  std::vector<std::optional<double>> gpmMetrics(unsigned gpu, const NvmlGpmSample& earlier,
                                                const NvmlGpmSample& later, const std::vector<unsigned>& metric_ids);

  // NVML's own text for a return code ("Not Supported").
  std::string errorString(nvml_abi::nvmlReturn_t rc) const;

  // Registers the GPU for Xid critical-error events; false when the GPU or
  // the library does not support them.
  bool watchXidEvents(unsigned gpu);
  // The Xid events queued since the last call, without waiting.
  std::vector<NvmlXidEvent> pollXidEvents();

 private:
  struct Functions;
  Nvml(void* handle, std::string library_name);
  void init();
  nvml_abi::nvmlDevice_t device(unsigned gpu) const;
  // True on success; on failure false, logging once per (call, gpu) unless
  // the failure means "not supported".
  bool readable(nvml_abi::nvmlReturn_t rc, const char* call, unsigned gpu);
  std::optional<std::string> readString(nvml_abi::DeviceGetStringFn fn, const char* call, unsigned gpu,
                                        unsigned size);
  std::optional<unsigned> readUint(nvml_abi::DeviceGetUintFn fn, const char* call, unsigned gpu);
  std::optional<uint64_t> readUll(nvml_abi::DeviceGetUllFn fn, const char* call, unsigned gpu);
  std::optional<std::string> readSystemString(nvml_abi::SystemGetStringFn fn, const char* call, unsigned size);
  std::optional<int> readLinkInt(nvml_abi::DeviceGetLinkIntFn fn, const char* call, unsigned gpu, unsigned link);

  void* handle_;
  bool initialized_ = false;  // nvmlInit_v2 succeeded: shut down on destruction
  std::string library_name_;
  std::unique_ptr<Functions> fn_;
  std::vector<unsigned> gpu_indices_;
  std::vector<std::pair<unsigned, nvml_abi::nvmlDevice_t>> devices_;
  std::mutex mutex_;
  std::set<std::pair<std::string, unsigned>> warned_;  // GUARDED_BY(mutex_)
  nvml_abi::nvmlEventSet_t event_set_ = nullptr;       // GUARDED_BY(mutex_)
  bool event_set_failed_ = false;                      // GUARDED_BY(mutex_)
};

}  // namespace dtrain::gpu
