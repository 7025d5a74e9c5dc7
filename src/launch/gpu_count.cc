// countVisibleGpus (launch_config.h): the GPU count torchrun gets from
// torch.cuda.device_count(), without linking CUDA or NVML.
#include <cctype>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "launch/launch_config.h"

namespace dtrain {
namespace {

namespace fs = std::filesystem;

bool allDigits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// GPUs the driver knows: one directory per PCI device under
// /proc/driver/nvidia/gpus, else one /dev/nvidiaN node each (the nodes can be
// missing until something first opens the driver, hence the order).
int countInstalledGpus(const std::string& root) {
  std::error_code ec;
  int from_proc = 0;
  for (const auto& entry : fs::directory_iterator(root + "/proc/driver/nvidia/gpus", ec)) {
    if (entry.is_directory(ec)) ++from_proc;
  }
  if (from_proc > 0) return from_proc;
  int from_dev = 0;
  for (const auto& entry : fs::directory_iterator(root + "/dev", ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("nvidia", 0) == 0 && allDigits(name.substr(6)) && !entry.is_directory(ec)) {
      ++from_dev;
    }
  }
  return from_dev;
}

std::vector<std::string> splitCommas(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t comma = s.find(',', start);
    parts.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return parts;
    start = comma + 1;
  }
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\n\r") - b + 1);
}

// strtoul-like, as CUDA reads an entry: the leading integer ("1gpu" -> 1),
// -1 when there is none or it is negative.
long long leadingOrdinal(const std::string& entry) {
  size_t i = 0;
  bool negative = false;
  if (i < entry.size() && (entry[i] == '+' || entry[i] == '-')) negative = entry[i++] == '-';
  size_t digits_begin = i;
  long long value = 0;
  while (i < entry.size() && std::isdigit(static_cast<unsigned char>(entry[i])) && value < (1LL << 40)) {
    value = value * 10 + (entry[i++] - '0');
  }
  if (i == digits_begin || negative) return -1;
  return value;
}

// CUDA_VISIBLE_DEVICES as CUDA reads it (PyTorch's _parse_visible_devices
// mirrors the same rules): entries are taken up to the first invalid one;
// a repeated entry hides every device.
int countListed(const std::string& visible, int installed) {
  const std::vector<std::string> entries = splitCommas(visible);
  for (const char* prefix : {"GPU-", "MIG-"}) {
    if (visible.rfind(prefix, 0) != 0) continue;
    // UUIDs are counted as given: without NVML they cannot be matched to
    // devices, so an unknown UUID counts too (CUDA would stop there). More
    // GPU UUIDs than installed GPUs cannot all be real: capped. MIG instances
    // are not capped (one GPU holds several).
    std::vector<std::string> seen;
    for (const std::string& entry : entries) {
      if (entry.rfind(prefix, 0) != 0) break;
      for (const std::string& s : seen) {
        if (s == entry) return 0;
      }
      seen.push_back(entry);
    }
    const int listed = static_cast<int>(seen.size());
    return prefix[0] == 'G' && listed > installed ? installed : listed;
  }
  std::vector<long long> seen;
  for (const std::string& entry : entries) {
    long long ordinal = leadingOrdinal(trim(entry));
    if (ordinal < 0) break;
    for (long long s : seen) {
      if (s == ordinal) return 0;
    }
    seen.push_back(ordinal);
  }
  // An ordinal the machine does not have ends the list there.
  int count = 0;
  for (long long ordinal : seen) {
    if (ordinal >= installed) break;
    ++count;
  }
  return count;
}

}  // namespace

int countVisibleGpus(const std::map<std::string, std::string>& env, const std::string& root) {
  const int installed = countInstalledGpus(root);
  if (installed == 0) return 0;
  auto visible = env.find("CUDA_VISIBLE_DEVICES");
  if (visible == env.end()) return installed;
  return countListed(visible->second, installed);
}

}  // namespace dtrain
