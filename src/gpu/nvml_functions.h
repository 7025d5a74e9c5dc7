// The NVML functions an Nvml object resolved with dlsym (nvml.h), shared by
// the files that implement Nvml (nvml.cc, nvml_gpm.cc); private to gpu/.
// A null pointer is a function the library lacks.
#pragma once

#include "gpu/nvml.h"
#include "gpu/nvml_abi.h"

namespace dtrain::gpu {

struct Nvml::Functions {
  // Required.
  nvml_abi::InitFn nvmlInit_v2 = nullptr;
  nvml_abi::ShutdownFn nvmlShutdown = nullptr;
  nvml_abi::ErrorStringFn nvmlErrorString = nullptr;
  nvml_abi::DeviceGetCountFn nvmlDeviceGetCount_v2 = nullptr;
  nvml_abi::DeviceGetHandleByIndexFn nvmlDeviceGetHandleByIndex_v2 = nullptr;
  // Optional: a missing one leaves its readings out.
  nvml_abi::DeviceGetStringFn nvmlDeviceGetUUID = nullptr;
  nvml_abi::DeviceGetStringFn nvmlDeviceGetName = nullptr;
  nvml_abi::DeviceGetPciInfoFn nvmlDeviceGetPciInfo_v3 = nullptr;
  nvml_abi::DeviceGetUintFn nvmlDeviceGetMinorNumber = nullptr;
  nvml_abi::DeviceGetUtilizationRatesFn nvmlDeviceGetUtilizationRates = nullptr;
  nvml_abi::DeviceGetMemoryInfoV2Fn nvmlDeviceGetMemoryInfo_v2 = nullptr;
  nvml_abi::DeviceGetMemoryInfoFn nvmlDeviceGetMemoryInfo = nullptr;
  nvml_abi::DeviceGetTemperatureFn nvmlDeviceGetTemperature = nullptr;
  nvml_abi::DeviceGetUintFn nvmlDeviceGetPowerUsage = nullptr;
  nvml_abi::DeviceGetUllFn nvmlDeviceGetTotalEnergyConsumption = nullptr;
  nvml_abi::DeviceGetClockInfoFn nvmlDeviceGetClockInfo = nullptr;
  nvml_abi::DeviceGetUllFn nvmlDeviceGetCurrentClocksEventReasons = nullptr;
  nvml_abi::DeviceGetUllFn nvmlDeviceGetCurrentClocksThrottleReasons = nullptr;
  nvml_abi::DeviceGetUintFn nvmlDeviceGetPcieReplayCounter = nullptr;
  nvml_abi::DeviceGetTotalEccErrorsFn nvmlDeviceGetTotalEccErrors = nullptr;
  nvml_abi::DeviceGetRemappedRowsFn nvmlDeviceGetRemappedRows = nullptr;
  nvml_abi::DeviceGetFieldValuesFn nvmlDeviceGetFieldValues = nullptr;
  nvml_abi::EventSetCreateFn nvmlEventSetCreate = nullptr;
  nvml_abi::DeviceRegisterEventsFn nvmlDeviceRegisterEvents = nullptr;
  nvml_abi::EventSetWaitFn nvmlEventSetWait_v2 = nullptr;
  nvml_abi::EventSetFreeFn nvmlEventSetFree = nullptr;
  // Optional, read by `dtrain doctor`.
  nvml_abi::SystemGetStringFn nvmlSystemGetDriverVersion = nullptr;
  nvml_abi::SystemGetStringFn nvmlSystemGetNVMLVersion = nullptr;
  nvml_abi::SystemGetCudaDriverVersionFn nvmlSystemGetCudaDriverVersion_v2 = nullptr;
  nvml_abi::DeviceGetEnableStateFn nvmlDeviceGetPersistenceMode = nullptr;
  nvml_abi::DeviceGetUintFn nvmlDeviceGetCurrPcieLinkGeneration = nullptr;
  nvml_abi::DeviceGetUintFn nvmlDeviceGetGpuMaxPcieLinkGeneration = nullptr;
  nvml_abi::DeviceGetUintFn nvmlDeviceGetMaxPcieLinkGeneration = nullptr;
  nvml_abi::DeviceGetUintFn nvmlDeviceGetCurrPcieLinkWidth = nullptr;
  nvml_abi::DeviceGetUintFn nvmlDeviceGetMaxPcieLinkWidth = nullptr;
  nvml_abi::DeviceGetLinkIntFn nvmlDeviceGetNvLinkState = nullptr;
  nvml_abi::DeviceGetLinkIntFn nvmlDeviceGetNvLinkRemoteDeviceType = nullptr;
  nvml_abi::DeviceGetNvLinkRemotePciInfoFn nvmlDeviceGetNvLinkRemotePciInfo_v2 = nullptr;
  nvml_abi::DeviceGetTopologyCommonAncestorFn nvmlDeviceGetTopologyCommonAncestor = nullptr;
  nvml_abi::DeviceGetP2PStatusFn nvmlDeviceGetP2PStatus = nullptr;
  nvml_abi::DeviceGetGpuFabricInfoVFn nvmlDeviceGetGpuFabricInfoV = nullptr;
  nvml_abi::DeviceGetGpuFabricInfoFn nvmlDeviceGetGpuFabricInfo = nullptr;
  nvml_abi::DeviceGetProcessesFn nvmlDeviceGetComputeRunningProcesses_v3 = nullptr;
  nvml_abi::DeviceGetProcessesFn nvmlDeviceGetComputeRunningProcesses_v2 = nullptr;
  // Optional, GPU Performance Monitoring (drivers from R520 on; nvml_gpm.cc).
  nvml_abi::GpmQueryDeviceSupportFn nvmlGpmQueryDeviceSupport = nullptr;
  nvml_abi::GpmSampleAllocFn nvmlGpmSampleAlloc = nullptr;
  nvml_abi::GpmSampleFreeFn nvmlGpmSampleFree = nullptr;
  nvml_abi::GpmSampleGetFn nvmlGpmSampleGet = nullptr;
  nvml_abi::GpmMetricsGetFn nvmlGpmMetricsGet = nullptr;
};

}  // namespace dtrain::gpu
