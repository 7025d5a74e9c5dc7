#include "train/straggler_device.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <memory>
#include <optional>

#include "common/host.h"
#include "gpu/nvml.h"

#if DTRAIN_TORCH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dtrain {
namespace {

namespace abi = gpu::nvml_abi;

// "0000:3B:00.0" (CUDA) and "00000000:3B:00.0" (NVML) name the same bus:
// compare what follows the domain, ignoring case.
std::string busWithoutDomain(const std::string& id) {
  std::string out = id.substr(id.find(':') == std::string::npos ? 0 : id.find(':') + 1);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// The CUDA device's PCI bus id, or "" (no CUDA in this build, or CUDA failed).
std::string cudaBusId(int index) {
#if DTRAIN_TORCH_CUDA
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, sizeof(id), index) == cudaSuccess) return id;
#else
  (void)index;
#endif
  return "";
}

std::string gpuDetail(gpu::Nvml& nvml, unsigned gpu) {
  std::string text = nvml.name(gpu).value_or("(name unknown)");
  if (auto uuid = nvml.uuid(gpu)) text += " (" + *uuid + ")";
  const std::optional<unsigned> sm = nvml.clockMhz(gpu, abi::NVML_CLOCK_SM);
  text += sm ? ", SM clock " + std::to_string(*sm) + " MHz" : ", SM clock unknown";
  const std::optional<uint64_t> reasons = nvml.clockEventReasons(gpu);
  text += reasons ? ", throttled: " + slowdownReasons(*reasons) : ", throttle reasons unknown";
  return text;
}

}  // namespace

std::string slowdownReasons(uint64_t mask) {
  std::string out;
  const auto add = [&](uint64_t bits, const char* word) {
    if ((mask & bits) == 0) return;
    if (!out.empty()) out += ", ";
    out += word;
  };
  add(abi::kClocksEventSwPowerCap, "power cap");
  add(abi::kClocksEventSwThermalSlowdown | abi::kClocksEventHwThermalSlowdown, "thermal");
  add(abi::kClocksEventHwSlowdown, "HW slowdown");
  add(abi::kClocksEventHwPowerBrakeSlowdown, "power brake");
  return out.empty() ? "none" : out;
}

std::string describeRankDevice(torch::Device device) {
  const std::string host = "host " + hostName();
  if (!device.is_cuda()) return host + ", no GPU (CPU)";
  const int index = device.index();
  std::string text = host + ", GPU " + std::to_string(index);
  try {
    std::unique_ptr<gpu::Nvml> nvml = gpu::Nvml::open();
    const std::string bus = busWithoutDomain(cudaBusId(index));
    for (unsigned g : nvml->gpus()) {
      const std::optional<std::string> id = nvml->pciBusId(g);
      if (!bus.empty() && id && busWithoutDomain(*id) == bus) return text + " " + gpuDetail(*nvml, g);
    }
    return text + " (not found among NVML's GPUs by its PCI bus id '" + bus + "')";
  } catch (const std::exception& e) {
    return text + " (no clocks: " + e.what() + ")";
  }
}

}  // namespace dtrain
