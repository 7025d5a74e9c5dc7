// A fake libnvidia-ml for the exporter's and the doctor's tests, loaded through
// DTRAIN_NVML_LIBRARY: the C ABI subset of src/exporter/nvml_abi.h, two GPUs
// with fixed readings (fake_nvml_values.h), and a few holes real drivers have:
//   - GPU 1 answers NOT_SUPPORTED for power and for the memory-temperature field;
//   - the library lacks nvmlDeviceGetPcieReplayCounter and
//     nvmlDeviceGetCurrentClocksEventReasons (an older driver), so the
//     exporter must leave PCIe replays out and fall back to ...ThrottleReasons;
//   - one Xid 79 on GPU 0 is queued once, at the first event wait;
//   - GPM (fake_nvml_gpm.cc, the same library) on GPU 0 only.
// Counters (energy, NVLink) advance by a fixed step per read.
// FAKE_NVML_INIT_ERROR=<code> makes nvmlInit_v2 fail with that code.
// The functions `dtrain doctor` adds answer as a healthy node would, unless
// FAKE_NVML_SCENARIO (read at every call; fake_nvml_values.h lists them)
// picks another node.
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "gpu/nvml_abi.h"
#include "fake_nvml_values.h"

namespace dtrain::gpu::nvml_abi {
struct nvmlDevice_st {
  unsigned index;
};
struct nvmlEventSet_st {
  std::atomic<unsigned long long> registered[2];
};
}  // namespace dtrain::gpu::nvml_abi

using namespace dtrain::gpu::nvml_abi;
namespace fake = dtrain::testing::fake_nvml;

namespace {

nvmlDevice_st g_devices[fake::kGpus] = {{0}, {1}};
nvmlEventSet_st g_event_set;
std::atomic<bool> g_xid_delivered{false};
std::atomic<unsigned> g_energy_reads[fake::kGpus];
std::atomic<unsigned> g_nvlink_reads[fake::kGpus];

bool valid(nvmlDevice_t device) { return device == &g_devices[0] || device == &g_devices[1]; }

// True when FAKE_NVML_SCENARIO lists `name`.
bool scenario(const char* name) {
  const char* value = std::getenv("FAKE_NVML_SCENARIO");
  if (value == nullptr) return false;
  std::string list = std::string(",") + value + ",";
  return list.find(std::string(",") + name + ",") != std::string::npos;
}

bool healthy() { return scenario("healthy") || scenario("degraded"); }

unsigned linkCount() { return scenario("nvswitch") ? fake::kSwitchLinks : fake::kNvlinks; }

nvmlReturn_t copyString(const char* text, char* out, unsigned size) {
  if (out == nullptr || std::strlen(text) + 1 > size) return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  std::strcpy(out, text);
  return NVML_SUCCESS;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlInit_v2() {
  const char* forced = std::getenv("FAKE_NVML_INIT_ERROR");
  return forced != nullptr ? std::atoi(forced) : NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown() { return NVML_SUCCESS; }

const char* nvmlErrorString(nvmlReturn_t rc) {
  switch (rc) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    default: return "Unknown Error";
  }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = scenario("no_gpus") ? 0 : fake::kGpus;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (index >= fake::kGpus) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &g_devices[index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int size) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  return copyString(fake::kUuid[device->index], uuid, size);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int size) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  return copyString(fake::kModel, name, size);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  std::memset(pci, 0, sizeof(*pci));
  std::strcpy(pci->busId, fake::kPciBusId[device->index]);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  *minor = fake::kMinor[device->index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* util) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  util->gpu = fake::kGpuUtil[device->index];
  util->memory = fake::kMemUtil[device->index];
  if (healthy()) util->gpu = util->memory = 0;
  if (scenario("busy")) util->gpu = fake::kBusyUtil;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* mem) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  if (mem->version != kNvmlMemoryV2Version) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  constexpr unsigned long long kMiB = 1ULL << 20;
  mem->total = fake::kFbTotalMiB * kMiB;
  mem->reserved = fake::kFbReservedMiB * kMiB;
  mem->used = fake::kFbUsedMiB[device->index] * kMiB;
  mem->free = mem->total - mem->reserved - mem->used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* mem) {
  return NVML_ERROR_UNKNOWN;  // the exporter must prefer _v2
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int* temp) {
  if (!valid(device) || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  *temp = fake::kGpuTemp[device->index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* milliwatts) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  if (device->index == 1) return NVML_ERROR_NOT_SUPPORTED;
  *milliwatts = fake::kPowerMilliwatts0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long* millijoules) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned reads = g_energy_reads[device->index]++;
  *millijoules = fake::kEnergyStartMj[device->index] + fake::kEnergyStepMj * reads;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int* mhz) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  if (type == NVML_CLOCK_SM) {
    *mhz = fake::kSmClock[device->index];
  } else if (type == NVML_CLOCK_MEM) {
    *mhz = fake::kMemClock;
  } else {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long* reasons) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  *reasons = fake::kClockReasons[device->index];
  if (healthy()) *reasons = 0x1;  // gpu_idle
  if (scenario("degraded")) *reasons = fake::kDegradedClockReasons[device->index];
  if (scenario("power_cap")) *reasons = 0x5;  // gpu_idle + sw_power_cap
  if (scenario("busy")) *reasons = 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type, int counter_type,
                                         unsigned long long* count) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  if (error_type != NVML_MEMORY_ERROR_TYPE_UNCORRECTED || counter_type != NVML_VOLATILE_ECC) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *count = healthy() ? 0 : fake::kEccDbeVolatile[device->index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int* corrected, unsigned int* uncorrected,
                                       unsigned int* pending, unsigned int* failure) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  *corrected = 0;
  *uncorrected = fake::kRowRemapPending[device->index];
  *pending = fake::kRowRemapPending[device->index];
  *failure = 0;
  if (healthy()) *uncorrected = *pending = 0;
  if (scenario("degraded") && device->index == 1) *uncorrected = *pending = 1;
  if (scenario("remap_failure") && device->index == 0) *failure = 1;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t* values) {
  if (!valid(device) || count < 0) return NVML_ERROR_INVALID_ARGUMENT;
  const unsigned gpu = device->index;
  bool nvlink_read = false;
  for (int i = 0; i < count; ++i) {
    nvmlFieldValue_t& v = values[i];
    v.nvmlReturn = NVML_SUCCESS;
    if (v.fieldId == NVML_FI_DEV_MEMORY_TEMP) {
      if (gpu == 1) {
        v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        continue;
      }
      v.valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
      v.value.uiVal = fake::kMemoryTemp0;
    } else if ((v.fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ||
                v.fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX) &&
               v.scopeId == kNvmlScopeAllLinks) {
      unsigned reads = g_nvlink_reads[gpu].load();
      nvlink_read = true;
      unsigned long long start =
          v.fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ? fake::kNvlinkTxStartKiB : fake::kNvlinkRxStartKiB;
      v.valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
      v.value.ullVal = start + fake::kNvlinkStepKiB * reads;
    } else {
      // A single link, or a field the fake does not model.
      v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    }
  }
  if (nvlink_read) ++g_nvlink_reads[gpu];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  *set = &g_event_set;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
  if (!valid(device) || set != &g_event_set) return NVML_ERROR_INVALID_ARGUMENT;
  set->registered[device->index] |= types;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeout_ms) {
  if (set != &g_event_set) return NVML_ERROR_INVALID_ARGUMENT;
  if ((set->registered[0] & nvmlEventTypeXidCriticalError) != 0 && !g_xid_delivered.exchange(true)) {
    std::memset(data, 0, sizeof(*data));
    data->device = &g_devices[0];
    data->eventType = nvmlEventTypeXidCriticalError;
    data->eventData = fake::kXid;
    data->gpuInstanceId = UINT_MAX;
    data->computeInstanceId = UINT_MAX;
    return NVML_SUCCESS;
  }
  return NVML_ERROR_TIMEOUT;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) { return NVML_SUCCESS; }

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int size) {
  return copyString(fake::kDriverVersion, version, size);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int size) {
  return copyString(fake::kNvmlVersion, version, size);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *version = fake::kCudaDriverVersion;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, int* mode) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  *mode = scenario("degraded") && device->index == 1 ? NVML_FEATURE_DISABLED : NVML_FEATURE_ENABLED;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int* gen) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  *gen = fake::kPcieGen;
  if (scenario("degraded") && device->index == 0) *gen = fake::kDegradedGen0;
  if (scenario("busy")) *gen = fake::kBusyGen;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int* gen) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  *gen = fake::kPcieGen;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int* gen) {
  return nvmlDeviceGetGpuMaxPcieLinkGeneration(device, gen);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int* width) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  *width = scenario("degraded") && device->index == 1 ? fake::kDegradedWidth1 : fake::kPcieWidth;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int* width) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  *width = fake::kPcieWidth;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, int* active) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  if (scenario("no_nvlink")) return NVML_ERROR_NOT_SUPPORTED;
  if (link >= linkCount()) return NVML_ERROR_INVALID_ARGUMENT;
  bool down = scenario("degraded") && device->index == 0 && link == fake::kDegradedDownLink0;
  *active = down ? NVML_FEATURE_DISABLED : NVML_FEATURE_ENABLED;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link, int* type) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  if (scenario("no_nvlink")) return NVML_ERROR_NOT_SUPPORTED;
  if (link >= linkCount()) return NVML_ERROR_INVALID_ARGUMENT;
  *type = scenario("nvswitch") ? NVML_NVLINK_DEVICE_TYPE_SWITCH : NVML_NVLINK_DEVICE_TYPE_GPU;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t* pci) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  if (scenario("no_nvlink")) return NVML_ERROR_NOT_SUPPORTED;
  if (link >= linkCount()) return NVML_ERROR_INVALID_ARGUMENT;
  std::memset(pci, 0, sizeof(*pci));
  // NVML writes the legacy 4-digit domain here on some drivers: the doctor must compare bus ids by value.
  std::strcpy(pci->busId, scenario("nvswitch") ? fake::kSwitchPciBusId : fake::kPciBusId[1 - device->index] + 4);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, int* level) {
  if (!valid(a) || !valid(b)) return NVML_ERROR_INVALID_ARGUMENT;
  *level = a == b ? 0 : scenario("no_nvlink") ? 40 : fake::kTopologyLevel;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, int caps, int* status) {
  if (!valid(a) || !valid(b)) return NVML_ERROR_INVALID_ARGUMENT;
  if (caps == NVML_P2P_CAPS_INDEX_NVLINK && scenario("no_nvlink")) {
    *status = NVML_P2P_STATUS_NOT_SUPPORTED;
  } else {
    *status = scenario("degraded") ? NVML_P2P_STATUS_NOT_SUPPORTED : NVML_P2P_STATUS_OK;
  }
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfo_v2_t* info) {
  if (!valid(device)) return NVML_ERROR_INVALID_ARGUMENT;
  if (info->version != kNvmlGpuFabricInfoV2Version) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  bool registered = scenario("nvswitch") || scenario("fabric_error");
  if (!registered && !scenario("degraded")) return NVML_ERROR_NOT_SUPPORTED;
  std::memset(reinterpret_cast<char*>(info) + sizeof(info->version), 0, sizeof(*info) - sizeof(info->version));
  for (unsigned i = 0; i < NVML_GPU_FABRIC_UUID_LEN; ++i) info->clusterUuid[i] = static_cast<unsigned char>(0xa0 + i);
  info->state = registered ? NVML_GPU_FABRIC_STATE_COMPLETED : NVML_GPU_FABRIC_STATE_IN_PROGRESS;
  info->status = scenario("fabric_error") ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
  info->cliqueId = fake::kFabricClique;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                     nvmlProcessInfo_t* infos) {
  if (!valid(device) || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::vector<unsigned> pids;
  if (scenario("degraded") && device->index == 1) pids.push_back(fake::kForeignPid);
  if (scenario("owners")) {
    if (device->index == 0) pids.assign(std::begin(fake::kOwnerPids0), std::end(fake::kOwnerPids0));
    if (device->index == 1) pids.assign(std::begin(fake::kOwnerPids1), std::end(fake::kOwnerPids1));
  }
  if (*count < pids.size()) {
    *count = static_cast<unsigned>(pids.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  *count = static_cast<unsigned>(pids.size());
  for (size_t i = 0; i < pids.size(); ++i) {
    infos[i].pid = pids[i];
    infos[i].usedGpuMemory = fake::kForeignMiB << 20;
    infos[i].gpuInstanceId = infos[i].computeInstanceId = UINT_MAX;
  }
  return NVML_SUCCESS;
}

}  // extern "C"
