#include "doctor/gpu_pci.h"

#include <algorithm>
#include <cctype>

namespace dtrain::doctor {
namespace {

constexpr const char* kPciDevices = "/sys/bus/pci/devices/";

std::string lowered(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

}  // namespace

std::vector<std::string> nvidiaGpusOnPciBus(const SystemRoot& root) {
  std::vector<std::string> gpus;
  for (const std::string& address : root.list(kPciDevices)) {
    const std::string dir = kPciDevices + address;
    auto vendor = root.readLine(dir + "/vendor");
    auto device_class = root.readLine(dir + "/class");
    if (!vendor || !device_class || lowered(*vendor) != "0x10de") continue;
    // "0x030200": base class 0x03, display controller.
    if (device_class->size() != 8 || lowered(device_class->substr(0, 4)) != "0x03") continue;
    gpus.push_back(address);
  }
  std::sort(gpus.begin(), gpus.end());
  return gpus;
}

std::string joinAddresses(const std::vector<std::string>& addresses) {
  std::string out;
  for (const auto& address : addresses) out += (out.empty() ? "" : ", ") + address;
  return out;
}

}  // namespace dtrain::doctor
