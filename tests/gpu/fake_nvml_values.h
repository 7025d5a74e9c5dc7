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

// GPM (fake_nvml_gpm.cc): GPU 0 has it, GPU 1 does not. Metrics in NVML's
// units (percent, MiB/s); nvmlGpmMetricsGet refuses two samples less than
// kGpmMinWindowMs apart or taken in the wrong order.
constexpr double kGpmSmUtil0 = 83.5;
constexpr double kGpmSmOccupancy0 = 41.25;
constexpr double kGpmAnyTensorUtil0 = 62.5;
constexpr double kGpmDramBwUtil0 = 37.5;
constexpr double kGpmPcieTxMiBps0 = 512;
constexpr double kGpmPcieRxMiBps0 = 1536;
constexpr double kGpmNvlinkTxMiBps0 = 20480;
constexpr double kGpmNvlinkRxMiBps0 = 10240;
constexpr int kGpmMinWindowMs = 100;

// Readings `dtrain doctor` adds. Without FAKE_NVML_SCENARIO they are those of
// a healthy node (the readings above stay as the exporter's tests expect).
constexpr const char* kDriverVersion = "580.95.05";
constexpr const char* kNvmlVersion = "12.580.95.05";
constexpr int kCudaDriverVersion = 13000;  // CUDA 13.0
constexpr unsigned kPcieGen = 5;
constexpr unsigned kPcieWidth = 16;
constexpr unsigned kNvlinks = 4;       // links 0..3 of each GPU lead to the other GPU
constexpr unsigned kSwitchLinks = 18;  // "nvswitch": every link leads to an NVSwitch
constexpr const char* kSwitchPciBusId = "00000000:C1:00.0";
constexpr int kTopologyLevel = 50;     // NVML_TOPOLOGY_SYSTEM ("no_nvlink": 40, NODE)
constexpr unsigned kFabricClique = 7;  // "nvswitch"

// FAKE_NVML_SCENARIO: a comma-separated list of
//   healthy        both GPUs idle (0%), clock reasons gpu_idle only, no ECC
//                  errors, no remapped rows (overrides the readings above);
//   degraded       healthy, but: GPU 1 at x8 of x16, persistence off on GPU 1,
//                  a foreign process on GPU 1, rows pending remap on GPU 1,
//                  HW slowdown on idle GPU 0 and SW power cap on idle GPU 1,
//                  GPU 0 at Gen1 (idle), NVLink 3 of GPU 0 inactive, no P2P
//                  between the GPUs, fabric registration in progress;
//   busy           both GPUs at 95% and at Gen3 of Gen5;
//   nvswitch       every NVLink leads to an NVSwitch, fabric registered (clique 7);
//   no_nvlink      no NVLink; the GPUs share a NUMA node (NODE);
//   power_cap      SW power cap on both GPUs (with healthy: at idle);
//   remap_failure  row remapping failed on GPU 0;
//   fabric_error   fabric registration completed with an error;
//   owners         compute processes kOwnerPids0 on GPU 0 and kOwnerPids1 on
//                  GPU 1 (their /proc/<pid>/cgroup is the test's fixture);
//   no_gpus        NVML sees no GPU.
constexpr unsigned kDegradedWidth1 = 8;
constexpr unsigned kDegradedGen0 = 1;
constexpr unsigned kDegradedDownLink0 = 3;
constexpr unsigned kForeignPid = 4242;
constexpr unsigned long long kForeignMiB = 1536;
constexpr unsigned long long kDegradedClockReasons[kGpus] = {0x9, 0x5};  // idle + hw_slowdown; idle + sw_power_cap
constexpr unsigned kBusyUtil = 95;
constexpr unsigned kBusyGen = 3;
constexpr unsigned kOwnerPids0[2] = {5101, 5102};
constexpr unsigned kOwnerPids1[3] = {5201, 5202, 5203};

}  // namespace dtrain::testing::fake_nvml
