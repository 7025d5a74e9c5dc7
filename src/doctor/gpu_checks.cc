// The GPU checks' list (addGpuChecks), and the checks of the driver, the GPU
// count and persistence mode. The others live in gpu_versions.cc,
// gpu_health.cc, gpu_topology.cc and gpu_allreduce.cc.
#include "doctor/gpu_checks.h"

#include <map>
#include <sstream>

#include "common/text.h"
#include "doctor/gpu_allreduce.h"
#include "doctor/gpu_expected.h"
#include "doctor/gpu_health.h"
#include "doctor/gpu_pci.h"
#include "doctor/gpu_topology.h"
#include "doctor/gpu_versions.h"
#include "gpu/nvml.h"

namespace dtrain::doctor {
namespace {

constexpr const char* kDriverVersionFile = "/proc/driver/nvidia/version";

// "; the PCI bus has 2 NVIDIA GPUs (0000:19:00.0, 0000:3b:00.0)", or "".
std::string gpusOnBusNote(const std::vector<std::string>& on_bus) {
  if (on_bus.empty()) return "";
  return "; the PCI bus has " + counted(on_bus.size(), "NVIDIA GPU") + " (" + joinAddresses(on_bus) + ")";
}

// Without NVML, GPUs on the PCI bus (or expected by --expect-gpus / Slurm)
// make a broken node, not a node without GPUs: a Slurm health check must
// drain it.
CheckResult checkDriver(const DoctorContext& ctx) {
  const char* name = "gpu.driver";
  if (ctx.nvml == nullptr) {
    const bool driver_loaded = ctx.root.exists(kDriverVersionFile);
    const ExpectedGpus expected = expectedGpus(ctx);
    const bool gpus_expected = expected.count.value_or(0) > 0;
    const std::vector<std::string> on_bus = nvidiaGpusOnPciBus(ctx.root);
    if (!driver_loaded && !gpus_expected && on_bus.empty()) return skip(name, "no NVIDIA driver on this node");
    std::string why = (ctx.nvml_error.empty() ? "NVML not available" : ctx.nvml_error);
    if (!driver_loaded) {
      return fail(name,
                  why + " (no " + std::string(kDriverVersionFile) + ": the kernel module is not loaded)" +
                      gpusOnBusNote(on_bus),
                  "load the driver: `modprobe nvidia`, and read `dmesg | grep -i nvrm` for why it did not load");
    }
    auto version = ctx.root.readLine(kDriverVersionFile);
    return fail(name, why + gpusOnBusNote(on_bus),
                "the kernel module is loaded (" + version.value_or("?") +
                    ") but NVML failed: install the libnvidia-ml.so.1 of the same driver version, and check `dmesg`",
                ctx.root.read(kDriverVersionFile).value_or(""));
  }
  auto driver = ctx.nvml->driverVersion();
  auto nvml = ctx.nvml->nvmlVersion();
  return pass(name, "driver " + driver.value_or("version unknown") + ", NVML " + nvml.value_or("version unknown"),
              "library " + ctx.nvml->libraryName());
}

// "NVIDIA H200 x8" or "NVIDIA A100 x4, NVIDIA H100 x4".
std::string modelSummary(gpu::Nvml& nvml) {
  std::vector<std::pair<std::string, int>> models;
  for (unsigned gpu : nvml.gpus()) {
    std::string model = nvml.name(gpu).value_or("unknown model");
    bool found = false;
    for (auto& [name, count] : models) {
      if (name == model) {
        ++count;
        found = true;
      }
    }
    if (!found) models.emplace_back(model, 1);
  }
  std::string out;
  for (const auto& [name, count] : models) {
    if (!out.empty()) out += ", ";
    out += name + " x" + std::to_string(count);
  }
  return out;
}

CheckResult checkCount(const DoctorContext& ctx) {
  const char* name = "gpu.count";
  const ExpectedGpus expected = expectedGpus(ctx);
  if (!expected.error.empty()) {
    return fail(name, expected.error, "fix the job's GPU request (--gres=gpu:N) or pass --expect-gpus N");
  }
  if (ctx.nvml == nullptr) {
    const std::vector<std::string> on_bus = nvidiaGpusOnPciBus(ctx.root);
    if (expected.count.value_or(0) > 0) {
      return fail(name,
                  "NVML not available, expected " + counted(*expected.count, "GPU") + " (" + expected.source + ")" +
                      gpusOnBusNote(on_bus),
                  "see gpu.driver: without the driver no GPU can be used");
    }
    if (!on_bus.empty()) {
      return fail(name, "NVML not available" + gpusOnBusNote(on_bus) + ", none of them usable",
                  "see gpu.driver: without the driver no GPU can be used");
    }
    return skip(name, "NVML not available");
  }
  const size_t found = ctx.nvml->gpus().size();
  std::ostringstream detail;
  for (unsigned gpu : ctx.nvml->gpus()) {
    detail << gpuName(gpu) << " " << ctx.nvml->name(gpu).value_or("unknown model") << " "
           << ctx.nvml->pciBusId(gpu).value_or("?") << " " << ctx.nvml->uuid(gpu).value_or("?") << "\n";
  }
  std::string visible;
  if (auto cvd = ctx.envValue("CUDA_VISIBLE_DEVICES")) {
    visible = "; CUDA_VISIBLE_DEVICES=" + *cvd + " (NVML counts every GPU, CUDA only these)";
  }
  std::string reason = counted(found, "GPU") + (found > 0 ? ": " + modelSummary(*ctx.nvml) : "");
  if (expected.count && static_cast<size_t>(*expected.count) != found) {
    return fail(name,
                "found " + counted(found, "GPU") + ", expected " + std::to_string(*expected.count) + " (" +
                    expected.source + ")" + visible,
                "a GPU fell off the bus or is hidden: check `nvidia-smi -L`, `dmesg | grep -i xid` and "
                "`lspci | grep -i nvidia`; reseat or replace the GPU, or correct the expectation",
                detail.str());
  }
  if (expected.count) reason += " (expected " + std::to_string(*expected.count) + ", " + expected.source + ")";
  return pass(name, reason + visible, detail.str());
}

CheckResult checkPersistence(const DoctorContext& ctx) {
  const char* name = "gpu.persistence";
  if (ctx.nvml == nullptr) return skip(name, "NVML not available");
  if (ctx.nvml->gpus().empty()) return skip(name, "no GPUs");
  std::vector<std::string> off;
  std::ostringstream detail;
  size_t known = 0;
  for (unsigned gpu : ctx.nvml->gpus()) {
    auto mode = ctx.nvml->persistenceMode(gpu);
    if (!mode) continue;
    ++known;
    if (!*mode) off.push_back(gpuName(gpu));
    detail << gpuName(gpu) << " persistence mode " << (*mode ? "enabled" : "disabled") << "\n";
  }
  if (known == 0) return skip(name, "persistence mode not readable (NVML: not supported)");
  if (!off.empty()) {
    std::string list;
    for (const auto& gpu : off) list += (list.empty() ? "" : ", ") + gpu;
    return warn(name, "persistence mode disabled on " + list + " (of " + counted(known, "GPU") + ")",
                "run nvidia-persistenced (systemctl enable --now nvidia-persistenced) or `nvidia-smi -pm 1`: "
                "without it the driver tears down and re-initialises the GPU for every job",
                detail.str());
  }
  return pass(name, "persistence mode enabled on " + counted(known, "GPU"), detail.str());
}

}  // namespace

void addGpuChecks(std::vector<CheckSpec>& checks) {
  checks.push_back({"gpu.driver", "NVIDIA driver loaded and NVML usable; driver and NVML versions", false, checkDriver});
  checks.push_back({"gpu.cuda", "The CUDA version the driver supports against the CUDA runtime's", false,
                    checkCudaVersions});
  checks.push_back({"gpu.nccl", "NCCL library present and its version", false, checkNcclVersion});
  checks.push_back({"gpu.count", "GPU count against --expect-gpus or Slurm's GPUs on this node", false, checkCount});
  checks.push_back({"gpu.persistence", "Persistence mode on every GPU", false, checkPersistence});
  checks.push_back({"gpu.memory_health", "Remapped rows (pending, failed) and uncorrected ECC errors", false,
                    checkMemoryHealth});
  checks.push_back({"gpu.clocks", "Clock throttle reasons on idle GPUs", false, checkClocks});
  checks.push_back({"gpu.pcie", "PCIe link width and generation against the maximum", false, checkPcie});
  checks.push_back({"gpu.topology", "GPU-to-GPU topology matrix (NVLink / PCIe), inactive NVLinks, P2P access", false,
                    checkTopology});
  checks.push_back({"gpu.fabric", "NVSwitch fabric registration (Fabric Manager)", false, checkFabric});
  checks.push_back({"gpu.processes", "Processes already running on the GPUs", false, checkProcesses});
  checks.push_back({"gpu.allreduce", "A quick all-reduce across the local GPUs (dtrain bench allreduce)", true,
                    checkAllreduce});
  checks.push_back({"gpu.sendrecv", "Every pair of local GPUs' send/recv bandwidth; names the slowest pair "
                    "(dtrain bench sendrecv)", true, checkSendRecvPairs});
}

}  // namespace dtrain::doctor
