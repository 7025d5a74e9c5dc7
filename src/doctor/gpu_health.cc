#include "doctor/gpu_health.h"

#include <cstdio>
#include <sstream>

#include "common/text.h"
#include "doctor/gpu_expected.h"
#include "gpu/nvml.h"

namespace dtrain::doctor {
namespace {

using namespace gpu::nvml_abi;

// Findings of one check over all GPUs: the worst decides the status, and the
// reason lists the findings of that status, worst first.
class Findings {
 public:
  void add(Status status, std::string text, std::string hint) {
    items_.push_back({status, std::move(text), std::move(hint)});
  }
  bool empty() const { return items_.empty(); }

  CheckResult result(const char* name, const std::string& detail) const {
    for (Status status : {Status::kFail, Status::kWarn}) {
      std::string reason, hint;
      for (const auto& item : items_) {
        if (item.status != status) continue;
        reason += (reason.empty() ? "" : "; ") + item.text;
        if (hint.find(item.hint) == std::string::npos) hint += (hint.empty() ? "" : "; ") + item.hint;
      }
      if (reason.empty()) continue;
      return status == Status::kFail ? fail(name, reason, hint, detail) : warn(name, reason, hint, detail);
    }
    return pass(name, "", detail);
  }

 private:
  struct Item {
    Status status;
    std::string text;
    std::string hint;
  };
  std::vector<Item> items_;
};

std::optional<CheckResult> needGpus(const DoctorContext& ctx, const char* name) {
  if (ctx.nvml == nullptr) return skip(name, "NVML not available");
  if (ctx.nvml->gpus().empty()) return skip(name, "no GPUs");
  return std::nullopt;
}

// "GPU0 idle" / "GPU0 busy (87%)" / "GPU0 utilization unknown": a GPU is busy
// when NVML's last sample shows any kernel running.
struct Activity {
  bool busy = false;
  std::string text;
};
Activity activity(gpu::Nvml& nvml, unsigned gpu) {
  auto util = nvml.utilization(gpu);
  if (!util) return {false, "utilization unknown"};
  if (util->gpu > 0) return {true, "busy (" + std::to_string(util->gpu) + "%)"};
  return {false, "idle"};
}

}  // namespace

CheckResult checkMemoryHealth(const DoctorContext& ctx) {
  const char* name = "gpu.memory_health";
  if (auto none = needGpus(ctx, name)) return *none;
  Findings findings;
  std::ostringstream detail;
  size_t read = 0;
  for (unsigned gpu : ctx.nvml->gpus()) {
    const std::string label = gpuName(gpu);
    auto rows = ctx.nvml->remappedRows(gpu);
    auto ecc = ctx.nvml->eccUncorrectedVolatile(gpu);
    if (!rows && !ecc) continue;
    ++read;
    detail << label;
    if (rows) {
      detail << " remapped rows: " << rows->corrected << " correctable, " << rows->uncorrected << " uncorrectable"
             << (rows->pending ? ", remap pending" : "") << (rows->failure ? ", remapping FAILED" : "");
      if (rows->failure) {
        findings.add(Status::kFail, label + " row remapping failed",
                     "the GPU has no spare rows left: drain the node and replace the GPU");
      } else if (rows->pending) {
        findings.add(Status::kWarn, label + " row remap pending",
                     "reset the GPU (`nvidia-smi -r -i N` with nothing running) or reboot to apply the remap");
      }
    }
    if (ecc) {
      detail << (rows ? ";" : "") << " uncorrected ECC errors since driver load: " << *ecc;
      if (*ecc > 0) {
        findings.add(Status::kFail, label + " " + std::to_string(*ecc) + " uncorrected ECC errors (volatile)",
                     "drain the node and reset the GPU (`nvidia-smi -r`); if the errors return, replace the GPU");
      }
    }
    detail << "\n";
  }
  if (read == 0) return skip(name, "remapped rows and ECC counters not readable (NVML: not supported)");
  CheckResult result = findings.result(name, detail.str());
  if (result.status == Status::kPass) {
    result.reason = "no uncorrected ECC errors, no pending or failed row remaps on " + counted(read, "GPU");
  }
  return result;
}

CheckResult checkClocks(const DoctorContext& ctx) {
  const char* name = "gpu.clocks";
  if (auto none = needGpus(ctx, name)) return *none;
  // Reasons that must not show on an idle GPU; GpuIdle, the applications
  // clocks setting, sync boost and the display clock setting are benign.
  struct Reason {
    unsigned long long bit;
    const char* text;
    Status status;
    const char* hint;
  };
  static const Reason kReasons[] = {
      {kClocksEventHwSlowdown, "HW slowdown", Status::kFail,
       "hardware slowdown at idle means the board signals a power or thermal fault: check PSU and cooling "
       "(`nvidia-smi -q -d PERFORMANCE`), drain the node"},
      {kClocksEventHwThermalSlowdown, "HW thermal slowdown", Status::kFail,
       "the GPU is too hot at idle: check fans, airflow and inlet temperature"},
      {kClocksEventHwPowerBrakeSlowdown, "HW power brake", Status::kFail,
       "the power brake is asserted by the chassis: check the PSUs and the BMC's power capping"},
      {kClocksEventSwThermalSlowdown, "SW thermal slowdown", Status::kWarn,
       "the driver lowers clocks for temperature at idle: check cooling"},
      {kClocksEventSwPowerCap, "SW power cap", Status::kWarn,
       "capped by the power limit at idle: check `nvidia-smi -q -d POWER` for a lowered limit"},
  };
  Findings findings;
  std::ostringstream detail;
  size_t judged = 0, busy = 0;
  for (unsigned gpu : ctx.nvml->gpus()) {
    const std::string label = gpuName(gpu);
    auto reasons = ctx.nvml->clockEventReasons(gpu);
    if (!reasons) continue;
    Activity act = activity(*ctx.nvml, gpu);
    if (act.busy) {
      ++busy;
      detail << label << " " << act.text << ": not judged (throttle reasons are judged at idle)\n";
      continue;
    }
    ++judged;
    std::string found;
    for (const Reason& reason : kReasons) {
      if ((*reasons & reason.bit) == 0) continue;
      found += (found.empty() ? "" : ", ") + std::string(reason.text);
      findings.add(reason.status, label + " " + reason.text + " while " + act.text, reason.hint);
    }
    char mask[32];
    std::snprintf(mask, sizeof(mask), "0x%llx", static_cast<unsigned long long>(*reasons));
    detail << label << " " << act.text << ", clock event reasons " << mask
           << (found.empty() ? "" : " (" + found + ")") << "\n";
  }
  if (judged == 0 && busy == 0) return skip(name, "clock event reasons not readable (NVML: not supported)");
  if (judged == 0) return skip(name, "every GPU is busy: throttle reasons are judged at idle", detail.str());
  CheckResult result = findings.result(name, detail.str());
  if (result.status == Status::kPass) {
    result.reason = "no throttling on " + counted(judged, "idle GPU") + (busy > 0 ? " (" + std::to_string(busy) +
                                                                                      " busy, not judged)"
                                                                                : "");
  }
  return result;
}

CheckResult checkPcie(const DoctorContext& ctx) {
  const char* name = "gpu.pcie";
  if (auto none = needGpus(ctx, name)) return *none;
  Findings findings;
  std::ostringstream detail;
  size_t read = 0;
  bool idle_downshift = false;
  for (unsigned gpu : ctx.nvml->gpus()) {
    const std::string label = gpuName(gpu);
    auto gen = ctx.nvml->pcieLinkGeneration(gpu);
    auto max_gen = ctx.nvml->pcieMaxLinkGeneration(gpu);
    auto width = ctx.nvml->pcieLinkWidth(gpu);
    auto max_width = ctx.nvml->pcieMaxLinkWidth(gpu);
    if (!gen && !width) continue;
    ++read;
    auto text = [](std::optional<unsigned> g, std::optional<unsigned> w) {
      std::string out = "Gen";
      out += g ? std::to_string(*g) : "?";
      out += " x";
      out += w ? std::to_string(*w) : "?";
      return out;
    };
    detail << label << " " << text(gen, width) << " (max " << text(max_gen, max_width) << ")";
    if (width && max_width && *width < *max_width) {
      findings.add(Status::kFail, label + " at x" + std::to_string(*width) + " of x" + std::to_string(*max_width),
                   "a narrow link cuts host-to-GPU and GPUDirect RDMA bandwidth: reseat the GPU, check the riser and "
                   "the slot's bifurcation setting in the BIOS");
    }
    if (gen && max_gen && *gen < *max_gen) {
      Activity act = activity(*ctx.nvml, gpu);
      if (act.busy) {
        findings.add(Status::kWarn,
                     label + " at Gen" + std::to_string(*gen) + " of Gen" + std::to_string(*max_gen) + " while " +
                         act.text,
                     "check the slot's PCIe speed setting in the BIOS and the riser; re-run under load");
        detail << ", " << act.text;
      } else {
        idle_downshift = true;
        detail << ", " << act.text << ": a lower generation at idle is normal power saving";
      }
    }
    detail << "\n";
  }
  if (read == 0) return skip(name, "PCIe link not readable (NVML: not supported)");
  CheckResult result = findings.result(name, detail.str());
  if (result.status == Status::kPass) {
    result.reason = "links at full width on " + counted(read, "GPU") +
                    (idle_downshift ? "; lower generation at idle (power saving)" : "");
  }
  return result;
}

CheckResult checkProcesses(const DoctorContext& ctx) {
  const char* name = "gpu.processes";
  if (auto none = needGpus(ctx, name)) return *none;
  std::ostringstream detail;
  std::string reason;
  size_t read = 0, count = 0;
  for (unsigned gpu : ctx.nvml->gpus()) {
    auto processes = ctx.nvml->computeProcesses(gpu);
    if (!processes) continue;
    ++read;
    for (const auto& process : *processes) {
      ++count;
      const std::string pid = std::to_string(process.pid);
      auto comm = ctx.root.readLine("/proc/" + pid + "/comm");
      std::string memory =
          process.used_bytes ? std::to_string(*process.used_bytes >> 20) + " MiB" : std::string("memory unknown");
      std::string text = "pid " + pid + " (" + comm.value_or("?") + ") on " + gpuName(gpu) + " using " + memory;
      detail << text << "\n";
      if (count <= 3) reason += (reason.empty() ? "" : "; ") + text;
    }
  }
  if (read == 0) return skip(name, "compute processes not readable (NVML: not supported)");
  if (count == 0) return pass(name, "no compute processes on " + counted(read, "GPU"));
  if (count > 3) reason += "; and " + std::to_string(count - 3) + " more";
  const std::string processes = count == 1 ? "1 process" : std::to_string(count) + " processes";
  return warn(name, processes + " already on the GPUs: " + reason,
              "stop them or use another node (`nvidia-smi --query-compute-apps=pid,process_name,used_memory "
              "--format=csv`); a process outside this container shows as '?'",
              detail.str());
}

}  // namespace dtrain::doctor
