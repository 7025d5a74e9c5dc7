// The readings of the fake NVML (fake_nvml.cc), shared with the tests that
// check what the exporter makes of them.
#pragma once

namespace dtrain::testing::fake_nvml {

constexpr unsigned kGpus = 2;
constexpr const char* kModel = "NVIDIA H100 80GB HBM3";
constexpr const char* kUuid[kGpus] = {"GPU-6f1a2b3c-0000-4000-8000-000000000000",
                                      "GPU-6f1a2b3c-0000-4000-8000-000000000001"};
constexpr const char* kPciBusId[kGpus] = {"00000000:19:00.0", "00000000:3B:00.0"};
constexpr unsigned kMinor[kGpus] = {0, 3};
constexpr unsigned kGpuUtil[kGpus] = {87, 12};
constexpr unsigned kMemUtil[kGpus] = {41, 3};
constexpr unsigned long long kFbTotalMiB = 81559;
constexpr unsigned long long kFbReservedMiB = 527;
constexpr unsigned long long kFbUsedMiB[kGpus] = {60211, 1024};
constexpr unsigned kGpuTemp[kGpus] = {64, 38};
constexpr unsigned kMemoryTemp0 = 71;             // GPU 1: NOT_SUPPORTED
constexpr unsigned kPowerMilliwatts0 = 612345;    // GPU 1: NOT_SUPPORTED
constexpr unsigned long long kEnergyStartMj[kGpus] = {9876543210ULL, 1234567890ULL};
constexpr unsigned long long kEnergyStepMj = 612345;
constexpr unsigned kSmClock[kGpus] = {1980, 345};
constexpr unsigned kMemClock = 2619;
constexpr unsigned long long kClockReasons[kGpus] = {0x4, 0x41};  // sw_power_cap; gpu_idle + hw_thermal_slowdown
constexpr unsigned long long kEccDbeVolatile[kGpus] = {0, 2};
constexpr unsigned kRowRemapPending[kGpus] = {0, 1};
constexpr unsigned long long kNvlinkTxStartKiB = 1000000;
constexpr unsigned long long kNvlinkRxStartKiB = 2000000;
constexpr unsigned long long kNvlinkStepKiB = 4096;
constexpr unsigned long long kXid = 79;  // GPU 0, once

}  // namespace dtrain::testing::fake_nvml
