#include "exporter/gpu_owners.h"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace dtrain::exporter {
namespace {

std::vector<std::string> pathComponents(const std::string& path) {
  std::vector<std::string> out;
  std::istringstream in(path);
  for (std::string part; std::getline(in, part, '/');) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

bool allDigits(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); });
}

// A pod UID is a UUID: 36 characters, hex digits and dashes at 8-4-4-4-12.
bool isUuid(const std::string& text) {
  if (text.size() != 36) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? text[i] != '-' : !std::isxdigit(static_cast<unsigned char>(text[i]))) return false;
  }
  return true;
}

std::optional<std::string> slurmJob(const std::string& path) {
  if (path.find("slurm") == std::string::npos) return std::nullopt;
  for (const std::string& part : pathComponents(path)) {
    if (part.starts_with("job_") && allDigits(part.substr(4))) return part.substr(4);
  }
  return std::nullopt;
}

std::optional<std::string> podUid(const std::string& path) {
  if (path.find("kubepods") == std::string::npos) return std::nullopt;
  for (const std::string& part : pathComponents(path)) {
    // cgroupfs driver: "pod<uid>"; systemd driver: "kubepods[-<qos>]-pod<uid, _ for ->.slice".
    std::string candidate;
    if (part.starts_with("pod")) {
      candidate = part.substr(3);
    } else if (size_t at = part.find("-pod"); part.starts_with("kubepods") && at != std::string::npos) {
      candidate = part.substr(at + 4);
    }
    if (candidate.ends_with(".slice")) candidate.resize(candidate.size() - 6);
    std::replace(candidate.begin(), candidate.end(), '_', '-');
    if (isUuid(candidate)) return candidate;
  }
  return std::nullopt;
}

}  // namespace

std::optional<GpuOwner> ownerFromCgroup(const std::string& cgroup_text) {
  std::istringstream in(cgroup_text);
  for (std::string line; std::getline(in, line);) {
    // "hierarchy-id:controllers:path"; the path may itself hold ':'.
    size_t first = line.find(':');
    size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    std::string path = line.substr(second + 1);
    GpuOwner owner;
    owner.hpc_job = slurmJob(path).value_or("");
    owner.pod_uid = podUid(path).value_or("");
    if (!owner.hpc_job.empty() || !owner.pod_uid.empty()) return owner;
  }
  return std::nullopt;
}

std::vector<GpuOwner> ownersOf(const SystemRoot& root, const std::vector<gpu::NvmlProcess>& processes) {
  std::vector<GpuOwner> owners;
  for (const gpu::NvmlProcess& process : processes) {
    auto text = root.read("/proc/" + std::to_string(process.pid) + "/cgroup");
    if (!text) continue;
    if (auto owner = ownerFromCgroup(*text)) owners.push_back(*owner);
  }
  std::sort(owners.begin(), owners.end());
  owners.erase(std::unique(owners.begin(), owners.end()), owners.end());
  return owners;
}

}  // namespace dtrain::exporter
