// The subset of NVML's C ABI that dtrain calls, declared here so that the
// build needs neither nvml.h nor libnvidia-ml: the library is opened at run
// time (nvml.h). Layouts, values and signatures are those of NVIDIA's nvml.h
// (API version 12); keep them byte-identical. tests/gpu/fake_nvml.cc
// implements the same subset.
#pragma once

#include <climits>

namespace dtrain::gpu::nvml_abi {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlEventSet_t = struct nvmlEventSet_st*;

// nvmlReturn_t values.
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;
constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
constexpr nvmlReturn_t NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25;
constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

constexpr unsigned NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
constexpr unsigned NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;

struct nvmlPciInfo_t {
  char busIdLegacy[16];  // domain:bus:device.function, 4-digit domain
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];  // "00000000:3B:00.0"
};

struct nvmlMemory_t {  // bytes; used includes the driver's reserved memory
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct nvmlMemory_v2_t {  // bytes; used excludes reserved
  unsigned int version;  // kNvmlMemoryV2Version
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
// NVML_STRUCT_VERSION(Memory, 2)
constexpr unsigned int kNvmlMemoryV2Version = static_cast<unsigned int>(sizeof(nvmlMemory_v2_t)) | (2u << 24);

struct nvmlUtilization_t {  // percent over the last sample period
  unsigned int gpu;
  unsigned int memory;
};

// nvmlTemperatureSensors_t, nvmlClockType_t, nvmlMemoryErrorType_t,
// nvmlEccCounterType_t: C enums, passed as int.
constexpr int NVML_TEMPERATURE_GPU = 0;
constexpr int NVML_CLOCK_SM = 1;
constexpr int NVML_CLOCK_MEM = 2;
constexpr int NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
constexpr int NVML_VOLATILE_ECC = 0;

// nvmlValueType_t
constexpr int NVML_VALUE_TYPE_DOUBLE = 0;
constexpr int NVML_VALUE_TYPE_UNSIGNED_INT = 1;
constexpr int NVML_VALUE_TYPE_UNSIGNED_LONG = 2;
constexpr int NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3;
constexpr int NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4;
constexpr int NVML_VALUE_TYPE_SIGNED_INT = 5;
constexpr int NVML_VALUE_TYPE_UNSIGNED_SHORT = 6;

union nvmlValue_t {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  unsigned short usVal;
};

struct nvmlFieldValue_t {
  unsigned int fieldId;
  unsigned int scopeId;  // NVLink: the link, or UINT_MAX for the sum of all links
  long long timestamp;
  long long latencyUsec;
  int valueType;  // nvmlValueType_t
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
};

// Field ids (NVML_FI_*).
constexpr unsigned int NVML_FI_DEV_MEMORY_TEMP = 82;
constexpr unsigned int NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138;  // KiB, cumulative
constexpr unsigned int NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139;  // KiB, cumulative
constexpr unsigned int kNvmlScopeAllLinks = UINT_MAX;

// Event types and data.
constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x0000000000000008ULL;

struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // the Xid for nvmlEventTypeXidCriticalError
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// nvmlClocksEventReasons (formerly ClocksThrottleReasons) bits.
constexpr unsigned long long kClocksEventGpuIdle = 0x1;
constexpr unsigned long long kClocksEventApplicationsClocksSetting = 0x2;
constexpr unsigned long long kClocksEventSwPowerCap = 0x4;
constexpr unsigned long long kClocksEventHwSlowdown = 0x8;
constexpr unsigned long long kClocksEventSyncBoost = 0x10;
constexpr unsigned long long kClocksEventSwThermalSlowdown = 0x20;
constexpr unsigned long long kClocksEventHwThermalSlowdown = 0x40;
constexpr unsigned long long kClocksEventHwPowerBrakeSlowdown = 0x80;
constexpr unsigned long long kClocksEventDisplayClockSetting = 0x100;

// System strings (nvmlSystemGetDriverVersion, nvmlSystemGetNVMLVersion).
constexpr unsigned NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;
constexpr unsigned NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE = 80;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;

// nvmlEnableState_t
constexpr int NVML_FEATURE_DISABLED = 0;
constexpr int NVML_FEATURE_ENABLED = 1;

// NVLink: links per GPU, and nvmlIntNvLinkDeviceType_t (the remote end).
constexpr unsigned NVML_NVLINK_MAX_LINKS = 18;
constexpr int NVML_NVLINK_DEVICE_TYPE_GPU = 0;
constexpr int NVML_NVLINK_DEVICE_TYPE_IBMNPU = 1;
constexpr int NVML_NVLINK_DEVICE_TYPE_SWITCH = 2;
constexpr int NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 255;

// nvmlGpuTopologyLevel_t: the closest common ancestor of two GPUs.
constexpr int NVML_TOPOLOGY_INTERNAL = 0;
constexpr int NVML_TOPOLOGY_SINGLE = 10;      // one PCIe switch (PIX)
constexpr int NVML_TOPOLOGY_MULTIPLE = 20;    // several PCIe switches (PXB)
constexpr int NVML_TOPOLOGY_HOSTBRIDGE = 30;  // a host bridge (PHB)
constexpr int NVML_TOPOLOGY_NODE = 40;        // one NUMA node (NODE)
constexpr int NVML_TOPOLOGY_SYSTEM = 50;      // across NUMA nodes (SYS)

// nvmlGpuP2PCapsIndex_t and nvmlGpuP2PStatus_t.
constexpr int NVML_P2P_CAPS_INDEX_READ = 0;
constexpr int NVML_P2P_CAPS_INDEX_WRITE = 1;
constexpr int NVML_P2P_CAPS_INDEX_NVLINK = 2;
constexpr int NVML_P2P_STATUS_OK = 0;
constexpr int NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = 1;
constexpr int NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2;
constexpr int NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3;
constexpr int NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4;
constexpr int NVML_P2P_STATUS_NOT_SUPPORTED = 5;
constexpr int NVML_P2P_STATUS_UNKNOWN = 6;

// NVSwitch fabric registration (nvmlGpuFabricState_t, an unsigned char).
constexpr unsigned NVML_GPU_FABRIC_UUID_LEN = 16;
constexpr unsigned char NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0;
constexpr unsigned char NVML_GPU_FABRIC_STATE_NOT_STARTED = 1;
constexpr unsigned char NVML_GPU_FABRIC_STATE_IN_PROGRESS = 2;
constexpr unsigned char NVML_GPU_FABRIC_STATE_COMPLETED = 3;

struct nvmlGpuFabricInfo_t {  // nvmlDeviceGetGpuFabricInfo (v1, no version field)
  unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
  nvmlReturn_t status;  // meaningful once state is COMPLETED
  unsigned int cliqueId;
  unsigned char state;
};

struct nvmlGpuFabricInfo_v2_t {  // nvmlDeviceGetGpuFabricInfoV with version kNvmlGpuFabricInfoV2Version
  unsigned int version;
  unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
  nvmlReturn_t status;
  unsigned int cliqueId;
  unsigned char state;
  unsigned int healthMask;
};
// NVML_STRUCT_VERSION(GpuFabricInfo, 2) = 0x02000024
constexpr unsigned int kNvmlGpuFabricInfoV2Version =
    static_cast<unsigned int>(sizeof(nvmlGpuFabricInfo_v2_t)) | (2u << 24);
static_assert(sizeof(nvmlGpuFabricInfo_v2_t) == 36, "nvmlGpuFabricInfo_v2_t layout");

// nvmlProcessInfo_t of nvmlDeviceGetComputeRunningProcesses_v3 (and the
// identical nvmlProcessInfo_v2_t of _v2).
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // bytes; NVML_VALUE_NOT_AVAILABLE when unknown
  unsigned int gpuInstanceId;        // 0xFFFFFFFF without MIG
  unsigned int computeInstanceId;
};
static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t layout");
constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE = ~0ULL;

// GPU Performance Monitoring (GPM, Hopper and later): counters sampled twice,
// NVML computes the metrics over the interval between the two samples (more
// than 100 ms apart).
using nvmlGpmSample_t = struct nvmlGpmSample_st*;

struct nvmlGpmMetric_t {
  unsigned int metricId;    // IN: NVML_GPM_METRIC_*
  nvmlReturn_t nvmlReturn;  // OUT: value is valid only when NVML_SUCCESS
  double value;
  struct {
    char* shortName;
    char* longName;
    char* unit;
  } metricInfo;  // OUT: may be null
};
static_assert(sizeof(nvmlGpmMetric_t) == 40, "nvmlGpmMetric_t layout");

// nvml.h sizes metrics[] by NVML_GPM_METRIC_MAX, which grew over releases
// (98, 210, 333) under the same struct version; NVML reads numMetrics
// entries. The array here has the largest size known so far.
constexpr unsigned kNvmlGpmMetricsCapacity = 333;
struct nvmlGpmMetricsGet_t {
  unsigned int version;  // NVML_GPM_METRICS_GET_VERSION
  unsigned int numMetrics;
  nvmlGpmSample_t sample1;  // the earlier sample
  nvmlGpmSample_t sample2;  // the later one
  nvmlGpmMetric_t metrics[kNvmlGpmMetricsCapacity];
};
constexpr unsigned int NVML_GPM_METRICS_GET_VERSION = 1;

struct nvmlGpmSupport_t {
  unsigned int version;  // NVML_GPM_SUPPORT_VERSION
  unsigned int isSupportedDevice;
};
constexpr unsigned int NVML_GPM_SUPPORT_VERSION = 1;

// nvmlGpmMetricId_t values dtrain reads: percentages 0..100, rates in MiB/s.
constexpr unsigned int NVML_GPM_METRIC_SM_UTIL = 2;
constexpr unsigned int NVML_GPM_METRIC_SM_OCCUPANCY = 3;
constexpr unsigned int NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5;
constexpr unsigned int NVML_GPM_METRIC_DRAM_BW_UTIL = 10;
constexpr unsigned int NVML_GPM_METRIC_PCIE_TX_PER_SEC = 20;
constexpr unsigned int NVML_GPM_METRIC_PCIE_RX_PER_SEC = 21;
constexpr unsigned int NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC = 60;
constexpr unsigned int NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC = 61;

// Function pointer types, one per symbol looked up.
using InitFn = nvmlReturn_t (*)();                                   // nvmlInit_v2
using ShutdownFn = nvmlReturn_t (*)();                               // nvmlShutdown
using ErrorStringFn = const char* (*)(nvmlReturn_t);                 // nvmlErrorString
using DeviceGetCountFn = nvmlReturn_t (*)(unsigned int*);            // nvmlDeviceGetCount_v2
using DeviceGetHandleByIndexFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);  // _v2
using DeviceGetStringFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);  // GetUUID, GetName
// MinorNumber, PowerUsage, PcieReplayCounter, Curr/Max/GpuMax PcieLinkGeneration, Curr/Max PcieLinkWidth
using DeviceGetUintFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);
using DeviceGetUllFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*);  // TotalEnergyConsumption, Clocks*Reasons
using DeviceGetPciInfoFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*);     // nvmlDeviceGetPciInfo_v3
using DeviceGetMemoryInfoFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using DeviceGetMemoryInfoV2Fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*);
using DeviceGetUtilizationRatesFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*);
using DeviceGetTemperatureFn = nvmlReturn_t (*)(nvmlDevice_t, int, unsigned int*);
using DeviceGetClockInfoFn = nvmlReturn_t (*)(nvmlDevice_t, int, unsigned int*);
using DeviceGetTotalEccErrorsFn = nvmlReturn_t (*)(nvmlDevice_t, int, int, unsigned long long*);
using DeviceGetRemappedRowsFn =
    nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*, unsigned int*, unsigned int*);
using DeviceGetFieldValuesFn = nvmlReturn_t (*)(nvmlDevice_t, int, nvmlFieldValue_t*);
using EventSetCreateFn = nvmlReturn_t (*)(nvmlEventSet_t*);
using DeviceRegisterEventsFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
using EventSetWaitFn = nvmlReturn_t (*)(nvmlEventSet_t, nvmlEventData_t*, unsigned int);  // _v2
using EventSetFreeFn = nvmlReturn_t (*)(nvmlEventSet_t);
using SystemGetStringFn = nvmlReturn_t (*)(char*, unsigned int);  // SystemGetDriverVersion, SystemGetNVMLVersion
using SystemGetCudaDriverVersionFn = nvmlReturn_t (*)(int*);      // nvmlSystemGetCudaDriverVersion_v2
using DeviceGetEnableStateFn = nvmlReturn_t (*)(nvmlDevice_t, int*);  // nvmlDeviceGetPersistenceMode
// nvmlDeviceGetNvLinkState (nvmlEnableState_t*), nvmlDeviceGetNvLinkRemoteDeviceType
// (nvmlIntNvLinkDeviceType_t*): C enums, an int each.
using DeviceGetLinkIntFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, int*);
using DeviceGetNvLinkRemotePciInfoFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, nvmlPciInfo_t*);  // _v2
using DeviceGetTopologyCommonAncestorFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlDevice_t, int*);
using DeviceGetP2PStatusFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlDevice_t, int, int*);
using DeviceGetGpuFabricInfoFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlGpuFabricInfo_t*);
using DeviceGetGpuFabricInfoVFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlGpuFabricInfo_v2_t*);
// nvmlDeviceGetComputeRunningProcesses_v3 and _v2.
using DeviceGetProcessesFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*);
using GpmQueryDeviceSupportFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlGpmSupport_t*);
using GpmSampleAllocFn = nvmlReturn_t (*)(nvmlGpmSample_t*);
using GpmSampleFreeFn = nvmlReturn_t (*)(nvmlGpmSample_t);
using GpmSampleGetFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlGpmSample_t);
using GpmMetricsGetFn = nvmlReturn_t (*)(nvmlGpmMetricsGet_t*);

}  // namespace dtrain::gpu::nvml_abi
