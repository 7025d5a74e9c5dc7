#include "gpu/nvml.h"

#include <dlfcn.h>

#include <climits>
#include <type_traits>

#include "common/error.h"
#include "common/log.h"
#include "common/settings.h"
#include "gpu/nvml_functions.h"

namespace dtrain::gpu {

using namespace nvml_abi;

namespace {

DTRAIN_SETTING(std::string, kNvmlLibrary, "nvml-library", "DTRAIN_NVML_LIBRARY", "libnvidia-ml.so.1",
               "The NVML library `dtrain exporter` opens with dlopen: a name on the loader's path or a file.");

bool meansUnsupported(nvmlReturn_t rc) {
  return rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_FUNCTION_NOT_FOUND;
}

}  // namespace

// Converts a failing NVML return code into IoError naming the function, the
// code and NVML's own string (and, through Error, the rank).
#define DTRAIN_NVML_CHECK(function, args)                                                   \
  do {                                                                                      \
    nvmlReturn_t dtrain_nvml_rc_ = fn_->function args;                                      \
    if (dtrain_nvml_rc_ != NVML_SUCCESS) {                                                  \
      throw IoError(std::string(#function " failed: NVML error ") +                         \
                    std::to_string(dtrain_nvml_rc_) + " (" + errorString(dtrain_nvml_rc_) + ")"); \
    }                                                                                       \
  } while (0)

std::string nvmlLibraryName() { return kNvmlLibrary.get(); }

std::unique_ptr<Nvml> Nvml::open() {
  std::string name = nvmlLibraryName();
  void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw IoError("NVML not available: " + (why != nullptr ? std::string(why) : "cannot open " + name));
  }
  std::unique_ptr<Nvml> nvml(new Nvml(handle, name));
  try {
    nvml->init();
  } catch (const Error& e) {
    throw IoError("NVML not available: " + e.message());
  }
  return nvml;
}

// Looks up every function dtrain calls; one the library lacks stays null
// (older drivers), and each caller says what that means.
Nvml::Nvml(void* handle, std::string library_name)
    : handle_(handle), library_name_(std::move(library_name)), fn_(std::make_unique<Functions>()) {
  auto resolve = [this](auto& slot, const char* symbol) {
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(::dlsym(handle_, symbol));
  };
#define DTRAIN_NVML_RESOLVE(symbol) resolve(fn_->symbol, #symbol)
  DTRAIN_NVML_RESOLVE(nvmlInit_v2);
  DTRAIN_NVML_RESOLVE(nvmlShutdown);
  DTRAIN_NVML_RESOLVE(nvmlErrorString);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetCount_v2);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetHandleByIndex_v2);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetUUID);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetName);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetPciInfo_v3);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetMinorNumber);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetUtilizationRates);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetMemoryInfo_v2);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetMemoryInfo);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetTemperature);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetPowerUsage);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetTotalEnergyConsumption);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetClockInfo);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetCurrentClocksEventReasons);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetCurrentClocksThrottleReasons);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetPcieReplayCounter);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetTotalEccErrors);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetRemappedRows);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetFieldValues);
  DTRAIN_NVML_RESOLVE(nvmlEventSetCreate);
  DTRAIN_NVML_RESOLVE(nvmlDeviceRegisterEvents);
  DTRAIN_NVML_RESOLVE(nvmlEventSetWait_v2);
  DTRAIN_NVML_RESOLVE(nvmlEventSetFree);
  DTRAIN_NVML_RESOLVE(nvmlSystemGetDriverVersion);
  DTRAIN_NVML_RESOLVE(nvmlSystemGetNVMLVersion);
  DTRAIN_NVML_RESOLVE(nvmlSystemGetCudaDriverVersion_v2);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetPersistenceMode);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetCurrPcieLinkGeneration);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetGpuMaxPcieLinkGeneration);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetMaxPcieLinkGeneration);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetCurrPcieLinkWidth);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetMaxPcieLinkWidth);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetNvLinkState);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetNvLinkRemoteDeviceType);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetNvLinkRemotePciInfo_v2);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetTopologyCommonAncestor);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetP2PStatus);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetGpuFabricInfoV);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetGpuFabricInfo);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetComputeRunningProcesses_v3);
  DTRAIN_NVML_RESOLVE(nvmlDeviceGetComputeRunningProcesses_v2);
  DTRAIN_NVML_RESOLVE(nvmlGpmQueryDeviceSupport);
  DTRAIN_NVML_RESOLVE(nvmlGpmSampleAlloc);
  DTRAIN_NVML_RESOLVE(nvmlGpmSampleFree);
  DTRAIN_NVML_RESOLVE(nvmlGpmSampleGet);
  DTRAIN_NVML_RESOLVE(nvmlGpmMetricsGet);
#undef DTRAIN_NVML_RESOLVE
}

void Nvml::init() {
  for (auto [present, symbol] : {std::pair{fn_->nvmlInit_v2 != nullptr, "nvmlInit_v2"},
                                 std::pair{fn_->nvmlShutdown != nullptr, "nvmlShutdown"},
                                 std::pair{fn_->nvmlErrorString != nullptr, "nvmlErrorString"},
                                 std::pair{fn_->nvmlDeviceGetCount_v2 != nullptr, "nvmlDeviceGetCount_v2"},
                                 std::pair{fn_->nvmlDeviceGetHandleByIndex_v2 != nullptr,
                                           "nvmlDeviceGetHandleByIndex_v2"}}) {
    if (!present) throw IoError(library_name_ + " has no " + symbol + " (not NVML, or a driver older than CUDA 5)");
  }
  DTRAIN_NVML_CHECK(nvmlInit_v2, ());
  initialized_ = true;
  unsigned count = 0;
  DTRAIN_NVML_CHECK(nvmlDeviceGetCount_v2, (&count));
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    nvmlReturn_t rc = fn_->nvmlDeviceGetHandleByIndex_v2(i, &device);
    if (rc != NVML_SUCCESS) {
      DTRAIN_LOG_WARN("GPU " << i << " left out: nvmlDeviceGetHandleByIndex_v2 failed: NVML error " << rc << " ("
                             << errorString(rc) << ")");
      continue;
    }
    gpu_indices_.push_back(i);
    devices_.emplace_back(i, device);
  }
}

Nvml::~Nvml() {
  if (event_set_ != nullptr && fn_->nvmlEventSetFree != nullptr) fn_->nvmlEventSetFree(event_set_);
  if (initialized_) fn_->nvmlShutdown();
  ::dlclose(handle_);
}

std::string Nvml::errorString(nvmlReturn_t rc) const {
  const char* text = fn_->nvmlErrorString != nullptr ? fn_->nvmlErrorString(rc) : nullptr;
  return text != nullptr ? text : "unknown error";
}

nvmlDevice_t Nvml::device(unsigned gpu) const {
  for (const auto& [index, device] : devices_) {
    if (index == gpu) return device;
  }
  throw ConfigError("no NVML device with index " + std::to_string(gpu));
}

bool Nvml::readable(nvmlReturn_t rc, const char* call, unsigned gpu) {
  if (rc == NVML_SUCCESS) return true;
  if (meansUnsupported(rc)) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  if (warned_.emplace(call, gpu).second) {
    DTRAIN_LOG_WARN(call << " failed on GPU " << gpu << ": NVML error " << rc << " (" << errorString(rc)
                         << "); its metric is left out");
  }
  return false;
}

std::optional<std::string> Nvml::readString(DeviceGetStringFn fn, const char* call, unsigned gpu, unsigned size) {
  if (fn == nullptr) return std::nullopt;
  std::string text(size, '\0');
  if (!readable(fn(device(gpu), text.data(), size), call, gpu)) return std::nullopt;
  text.resize(text.find('\0') == std::string::npos ? size : text.find('\0'));
  return text;
}

std::optional<unsigned> Nvml::readUint(DeviceGetUintFn fn, const char* call, unsigned gpu) {
  if (fn == nullptr) return std::nullopt;
  unsigned value = 0;
  if (!readable(fn(device(gpu), &value), call, gpu)) return std::nullopt;
  return value;
}

std::optional<uint64_t> Nvml::readUll(DeviceGetUllFn fn, const char* call, unsigned gpu) {
  if (fn == nullptr) return std::nullopt;
  unsigned long long value = 0;
  if (!readable(fn(device(gpu), &value), call, gpu)) return std::nullopt;
  return value;
}

std::optional<std::string> Nvml::uuid(unsigned gpu) {
  return readString(fn_->nvmlDeviceGetUUID, "nvmlDeviceGetUUID", gpu, NVML_DEVICE_UUID_V2_BUFFER_SIZE);
}

std::optional<std::string> Nvml::name(unsigned gpu) {
  return readString(fn_->nvmlDeviceGetName, "nvmlDeviceGetName", gpu, NVML_DEVICE_NAME_V2_BUFFER_SIZE);
}

std::optional<std::string> Nvml::pciBusId(unsigned gpu) {
  if (fn_->nvmlDeviceGetPciInfo_v3 == nullptr) return std::nullopt;
  nvmlPciInfo_t pci{};
  if (!readable(fn_->nvmlDeviceGetPciInfo_v3(device(gpu), &pci), "nvmlDeviceGetPciInfo_v3", gpu)) return std::nullopt;
  pci.busId[sizeof(pci.busId) - 1] = '\0';
  return std::string(pci.busId);
}

std::optional<unsigned> Nvml::minorNumber(unsigned gpu) {
  return readUint(fn_->nvmlDeviceGetMinorNumber, "nvmlDeviceGetMinorNumber", gpu);
}

std::optional<nvmlUtilization_t> Nvml::utilization(unsigned gpu) {
  if (fn_->nvmlDeviceGetUtilizationRates == nullptr) return std::nullopt;
  nvmlUtilization_t util{};
  if (!readable(fn_->nvmlDeviceGetUtilizationRates(device(gpu), &util), "nvmlDeviceGetUtilizationRates", gpu)) {
    return std::nullopt;
  }
  return util;
}

std::optional<NvmlMemory> Nvml::memory(unsigned gpu) {
  if (fn_->nvmlDeviceGetMemoryInfo_v2 != nullptr) {
    nvmlMemory_v2_t mem{};
    mem.version = kNvmlMemoryV2Version;
    nvmlReturn_t rc = fn_->nvmlDeviceGetMemoryInfo_v2(device(gpu), &mem);
    if (rc == NVML_SUCCESS) return NvmlMemory{mem.total, mem.free, mem.used};
    // A driver that knows the symbol but not this struct version: use v1.
    if (rc != NVML_ERROR_ARGUMENT_VERSION_MISMATCH && !readable(rc, "nvmlDeviceGetMemoryInfo_v2", gpu)) {
      return std::nullopt;
    }
  }
  if (fn_->nvmlDeviceGetMemoryInfo == nullptr) return std::nullopt;
  nvmlMemory_t mem{};
  if (!readable(fn_->nvmlDeviceGetMemoryInfo(device(gpu), &mem), "nvmlDeviceGetMemoryInfo", gpu)) return std::nullopt;
  return NvmlMemory{mem.total, mem.free, mem.used};
}

std::optional<unsigned> Nvml::temperatureC(unsigned gpu) {
  if (fn_->nvmlDeviceGetTemperature == nullptr) return std::nullopt;
  unsigned value = 0;
  if (!readable(fn_->nvmlDeviceGetTemperature(device(gpu), NVML_TEMPERATURE_GPU, &value), "nvmlDeviceGetTemperature",
                gpu)) {
    return std::nullopt;
  }
  return value;
}

std::optional<unsigned> Nvml::powerUsageMilliwatts(unsigned gpu) {
  return readUint(fn_->nvmlDeviceGetPowerUsage, "nvmlDeviceGetPowerUsage", gpu);
}

std::optional<uint64_t> Nvml::totalEnergyMillijoules(unsigned gpu) {
  return readUll(fn_->nvmlDeviceGetTotalEnergyConsumption, "nvmlDeviceGetTotalEnergyConsumption", gpu);
}

std::optional<unsigned> Nvml::clockMhz(unsigned gpu, int clock_type) {
  if (fn_->nvmlDeviceGetClockInfo == nullptr) return std::nullopt;
  unsigned value = 0;
  if (!readable(fn_->nvmlDeviceGetClockInfo(device(gpu), clock_type, &value), "nvmlDeviceGetClockInfo", gpu)) {
    return std::nullopt;
  }
  return value;
}

std::optional<uint64_t> Nvml::clockEventReasons(unsigned gpu) {
  if (fn_->nvmlDeviceGetCurrentClocksEventReasons != nullptr) {
    return readUll(fn_->nvmlDeviceGetCurrentClocksEventReasons, "nvmlDeviceGetCurrentClocksEventReasons", gpu);
  }
  return readUll(fn_->nvmlDeviceGetCurrentClocksThrottleReasons, "nvmlDeviceGetCurrentClocksThrottleReasons", gpu);
}

std::optional<unsigned> Nvml::pcieReplayCounter(unsigned gpu) {
  return readUint(fn_->nvmlDeviceGetPcieReplayCounter, "nvmlDeviceGetPcieReplayCounter", gpu);
}

std::optional<uint64_t> Nvml::eccUncorrectedVolatile(unsigned gpu) {
  if (fn_->nvmlDeviceGetTotalEccErrors == nullptr) return std::nullopt;
  unsigned long long value = 0;
  if (!readable(fn_->nvmlDeviceGetTotalEccErrors(device(gpu), NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC,
                                                 &value),
                "nvmlDeviceGetTotalEccErrors", gpu)) {
    return std::nullopt;
  }
  return value;
}

std::optional<NvmlRemappedRows> Nvml::remappedRows(unsigned gpu) {
  if (fn_->nvmlDeviceGetRemappedRows == nullptr) return std::nullopt;
  unsigned corrected = 0, uncorrected = 0, pending = 0, failure = 0;
  if (!readable(fn_->nvmlDeviceGetRemappedRows(device(gpu), &corrected, &uncorrected, &pending, &failure),
                "nvmlDeviceGetRemappedRows", gpu)) {
    return std::nullopt;
  }
  return NvmlRemappedRows{corrected, uncorrected, pending != 0, failure != 0};
}

std::vector<std::optional<double>> Nvml::fieldValues(unsigned gpu, const std::vector<NvmlFieldRequest>& requests) {
  std::vector<std::optional<double>> out(requests.size());
  if (fn_->nvmlDeviceGetFieldValues == nullptr || requests.empty()) return out;
  std::vector<nvmlFieldValue_t> values(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    values[i] = nvmlFieldValue_t{};
    values[i].fieldId = requests[i].field_id;
    values[i].scopeId = requests[i].scope_id;
  }
  if (!readable(fn_->nvmlDeviceGetFieldValues(device(gpu), static_cast<int>(values.size()), values.data()),
                "nvmlDeviceGetFieldValues", gpu)) {
    return out;
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const nvmlFieldValue_t& v = values[i];
    std::string call = "nvmlDeviceGetFieldValues(field " + std::to_string(v.fieldId) + ")";
    if (!readable(v.nvmlReturn, call.c_str(), gpu)) continue;
    switch (v.valueType) {
      case NVML_VALUE_TYPE_DOUBLE: out[i] = v.value.dVal; break;
      case NVML_VALUE_TYPE_UNSIGNED_INT: out[i] = v.value.uiVal; break;
      case NVML_VALUE_TYPE_UNSIGNED_LONG: out[i] = static_cast<double>(v.value.ulVal); break;
      case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: out[i] = static_cast<double>(v.value.ullVal); break;
      case NVML_VALUE_TYPE_SIGNED_LONG_LONG: out[i] = static_cast<double>(v.value.sllVal); break;
      case NVML_VALUE_TYPE_SIGNED_INT: out[i] = v.value.siVal; break;
      case NVML_VALUE_TYPE_UNSIGNED_SHORT: out[i] = v.value.usVal; break;
      default: break;  // a type this build does not know: leave it out
    }
  }
  return out;
}

std::optional<std::string> Nvml::readSystemString(SystemGetStringFn fn, const char* call, unsigned size) {
  if (fn == nullptr) return std::nullopt;
  std::string text(size, '\0');
  if (!readable(fn(text.data(), size), call, UINT_MAX)) return std::nullopt;
  text.resize(text.find('\0') == std::string::npos ? size : text.find('\0'));
  return text;
}

std::optional<std::string> Nvml::driverVersion() {
  return readSystemString(fn_->nvmlSystemGetDriverVersion, "nvmlSystemGetDriverVersion",
                          NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE);
}

std::optional<std::string> Nvml::nvmlVersion() {
  return readSystemString(fn_->nvmlSystemGetNVMLVersion, "nvmlSystemGetNVMLVersion",
                          NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE);
}

std::optional<int> Nvml::cudaDriverVersion() {
  if (fn_->nvmlSystemGetCudaDriverVersion_v2 == nullptr) return std::nullopt;
  int version = 0;
  if (!readable(fn_->nvmlSystemGetCudaDriverVersion_v2(&version), "nvmlSystemGetCudaDriverVersion_v2", UINT_MAX)) {
    return std::nullopt;
  }
  return version;
}

std::optional<bool> Nvml::persistenceMode(unsigned gpu) {
  if (fn_->nvmlDeviceGetPersistenceMode == nullptr) return std::nullopt;
  int state = NVML_FEATURE_DISABLED;
  if (!readable(fn_->nvmlDeviceGetPersistenceMode(device(gpu), &state), "nvmlDeviceGetPersistenceMode", gpu)) {
    return std::nullopt;
  }
  return state == NVML_FEATURE_ENABLED;
}

std::optional<unsigned> Nvml::pcieLinkGeneration(unsigned gpu) {
  return readUint(fn_->nvmlDeviceGetCurrPcieLinkGeneration, "nvmlDeviceGetCurrPcieLinkGeneration", gpu);
}

std::optional<unsigned> Nvml::pcieMaxLinkGeneration(unsigned gpu) {
  if (auto gen = readUint(fn_->nvmlDeviceGetGpuMaxPcieLinkGeneration, "nvmlDeviceGetGpuMaxPcieLinkGeneration", gpu)) {
    return gen;
  }
  return readUint(fn_->nvmlDeviceGetMaxPcieLinkGeneration, "nvmlDeviceGetMaxPcieLinkGeneration", gpu);
}

std::optional<unsigned> Nvml::pcieLinkWidth(unsigned gpu) {
  return readUint(fn_->nvmlDeviceGetCurrPcieLinkWidth, "nvmlDeviceGetCurrPcieLinkWidth", gpu);
}

std::optional<unsigned> Nvml::pcieMaxLinkWidth(unsigned gpu) {
  return readUint(fn_->nvmlDeviceGetMaxPcieLinkWidth, "nvmlDeviceGetMaxPcieLinkWidth", gpu);
}

std::optional<int> Nvml::readLinkInt(DeviceGetLinkIntFn fn, const char* call, unsigned gpu, unsigned link) {
  if (fn == nullptr) return std::nullopt;
  int value = 0;
  nvmlReturn_t rc = fn(device(gpu), link, &value);
  // A link the GPU does not have answers INVALID_ARGUMENT: not worth a warning.
  if (rc == NVML_ERROR_INVALID_ARGUMENT || !readable(rc, call, gpu)) return std::nullopt;
  return value;
}

std::optional<bool> Nvml::nvLinkActive(unsigned gpu, unsigned link) {
  auto state = readLinkInt(fn_->nvmlDeviceGetNvLinkState, "nvmlDeviceGetNvLinkState", gpu, link);
  if (!state) return std::nullopt;
  return *state == NVML_FEATURE_ENABLED;
}

std::optional<int> Nvml::nvLinkRemoteDeviceType(unsigned gpu, unsigned link) {
  return readLinkInt(fn_->nvmlDeviceGetNvLinkRemoteDeviceType, "nvmlDeviceGetNvLinkRemoteDeviceType", gpu, link);
}

std::optional<std::string> Nvml::nvLinkRemotePciBusId(unsigned gpu, unsigned link) {
  if (fn_->nvmlDeviceGetNvLinkRemotePciInfo_v2 == nullptr) return std::nullopt;
  nvmlPciInfo_t pci{};
  nvmlReturn_t rc = fn_->nvmlDeviceGetNvLinkRemotePciInfo_v2(device(gpu), link, &pci);
  if (rc == NVML_ERROR_INVALID_ARGUMENT || !readable(rc, "nvmlDeviceGetNvLinkRemotePciInfo_v2", gpu)) {
    return std::nullopt;
  }
  pci.busId[sizeof(pci.busId) - 1] = '\0';
  return std::string(pci.busId);
}

std::optional<int> Nvml::topologyCommonAncestor(unsigned gpu_a, unsigned gpu_b) {
  if (fn_->nvmlDeviceGetTopologyCommonAncestor == nullptr) return std::nullopt;
  int level = 0;
  if (!readable(fn_->nvmlDeviceGetTopologyCommonAncestor(device(gpu_a), device(gpu_b), &level),
                "nvmlDeviceGetTopologyCommonAncestor", gpu_a)) {
    return std::nullopt;
  }
  return level;
}

std::optional<int> Nvml::p2pStatus(unsigned gpu_a, unsigned gpu_b, int caps_index) {
  if (fn_->nvmlDeviceGetP2PStatus == nullptr) return std::nullopt;
  int status = NVML_P2P_STATUS_UNKNOWN;
  if (!readable(fn_->nvmlDeviceGetP2PStatus(device(gpu_a), device(gpu_b), caps_index, &status),
                "nvmlDeviceGetP2PStatus", gpu_a)) {
    return std::nullopt;
  }
  return status;
}

namespace {

// A 16-byte UUID as nvidia-smi prints it: 8-4-4-4-12 hex digits.
std::string uuidText(const unsigned char* bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 0xf];
  }
  return out;
}

}  // namespace

std::optional<NvmlFabricInfo> Nvml::fabricInfo(unsigned gpu) {
  if (fn_->nvmlDeviceGetGpuFabricInfoV != nullptr) {
    nvmlGpuFabricInfo_v2_t info{};
    info.version = kNvmlGpuFabricInfoV2Version;
    nvmlReturn_t rc = fn_->nvmlDeviceGetGpuFabricInfoV(device(gpu), &info);
    if (rc == NVML_SUCCESS) {
      return NvmlFabricInfo{info.state, info.status, info.cliqueId,
                            uuidText(info.clusterUuid), info.healthMask};
    }
    // A driver that knows the symbol but not this struct version: use v1.
    if (rc != NVML_ERROR_ARGUMENT_VERSION_MISMATCH && !readable(rc, "nvmlDeviceGetGpuFabricInfoV", gpu)) {
      return std::nullopt;
    }
  }
  if (fn_->nvmlDeviceGetGpuFabricInfo == nullptr) return std::nullopt;
  nvmlGpuFabricInfo_t info{};
  if (!readable(fn_->nvmlDeviceGetGpuFabricInfo(device(gpu), &info), "nvmlDeviceGetGpuFabricInfo", gpu)) {
    return std::nullopt;
  }
  return NvmlFabricInfo{info.state, info.status, info.cliqueId, uuidText(info.clusterUuid),
                        std::nullopt};
}

std::optional<std::vector<NvmlProcess>> Nvml::computeProcesses(unsigned gpu) {
  DeviceGetProcessesFn fn = fn_->nvmlDeviceGetComputeRunningProcesses_v3;
  const char* call = "nvmlDeviceGetComputeRunningProcesses_v3";
  if (fn == nullptr) {
    fn = fn_->nvmlDeviceGetComputeRunningProcesses_v2;
    call = "nvmlDeviceGetComputeRunningProcesses_v2";
  }
  if (fn == nullptr) return std::nullopt;
  // The list can grow between the sizing call and the read: retry a few times.
  std::vector<nvmlProcessInfo_t> infos(8);
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned count = static_cast<unsigned>(infos.size());
    nvmlReturn_t rc = fn(device(gpu), &count, infos.data());
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
      infos.resize(count + 8);
      continue;
    }
    if (!readable(rc, call, gpu)) return std::nullopt;
    std::vector<NvmlProcess> processes;
    for (unsigned i = 0; i < count && i < infos.size(); ++i) {
      NvmlProcess process;
      process.pid = infos[i].pid;
      if (infos[i].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE) process.used_bytes = infos[i].usedGpuMemory;
      processes.push_back(process);
    }
    return processes;
  }
  readable(NVML_ERROR_INSUFFICIENT_SIZE, call, gpu);
  return std::nullopt;
}

bool Nvml::watchXidEvents(unsigned gpu) {
  if (fn_->nvmlEventSetCreate == nullptr || fn_->nvmlDeviceRegisterEvents == nullptr ||
      fn_->nvmlEventSetWait_v2 == nullptr) {
    return false;
  }
  nvmlEventSet_t set = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (event_set_failed_) return false;
    if (event_set_ == nullptr) {
      nvmlReturn_t rc = fn_->nvmlEventSetCreate(&event_set_);
      if (rc != NVML_SUCCESS) {
        event_set_ = nullptr;
        event_set_failed_ = true;
        if (!meansUnsupported(rc)) {
          DTRAIN_LOG_WARN("nvmlEventSetCreate failed: NVML error " << rc << " (" << errorString(rc)
                                                                   << "); Xid events are not counted");
        }
        return false;
      }
    }
    set = event_set_;
  }
  return readable(fn_->nvmlDeviceRegisterEvents(device(gpu), nvmlEventTypeXidCriticalError, set),
                  "nvmlDeviceRegisterEvents", gpu);
}

std::vector<NvmlXidEvent> Nvml::pollXidEvents() {
  std::vector<NvmlXidEvent> events;
  nvmlEventSet_t set;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    set = event_set_;
  }
  if (set == nullptr) return events;
  // Bounded, so a storm of events cannot stall a collection.
  for (int i = 0; i < 1024; ++i) {
    nvmlEventData_t data{};
    nvmlReturn_t rc = fn_->nvmlEventSetWait_v2(set, &data, 0);
    if (rc == NVML_ERROR_TIMEOUT) break;  // nothing queued
    if (rc != NVML_SUCCESS) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (warned_.emplace("nvmlEventSetWait_v2", UINT_MAX).second) {
        DTRAIN_LOG_WARN("nvmlEventSetWait_v2 failed: NVML error " << rc << " (" << errorString(rc)
                                                                   << "); Xid events may be missed");
      }
      break;
    }
    if ((data.eventType & nvmlEventTypeXidCriticalError) == 0) continue;
    for (const auto& [index, device] : devices_) {
      if (device == data.device) events.push_back(NvmlXidEvent{index, data.eventData});
    }
  }
  return events;
}

}  // namespace dtrain::gpu
