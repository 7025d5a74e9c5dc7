#include "doctor/gpu_topology.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <tuple>

#include "doctor/gpu_expected.h"
#include "metrics/nvml.h"

namespace dtrain::doctor {
namespace {

using namespace metrics::nvml_abi;

// "00000000:3B:00.0" and "0000:3b:00.0" name the same device.
std::optional<std::tuple<unsigned, unsigned, unsigned, unsigned>> parseBusId(const std::string& text) {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (std::sscanf(text.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) return std::nullopt;
  return std::tuple{domain, bus, device, function};
}

std::string levelName(int level) {
  switch (level) {
    case NVML_TOPOLOGY_INTERNAL: return "INT";
    case NVML_TOPOLOGY_SINGLE: return "PIX";
    case NVML_TOPOLOGY_MULTIPLE: return "PXB";
    case NVML_TOPOLOGY_HOSTBRIDGE: return "PHB";
    case NVML_TOPOLOGY_NODE: return "NODE";
    case NVML_TOPOLOGY_SYSTEM: return "SYS";
    default: return "?";
  }
}

std::string p2pStatusName(int status) {
  switch (status) {
    case NVML_P2P_STATUS_OK: return "ok";
    case NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED: return "chipset not supported";
    case NVML_P2P_STATUS_GPU_NOT_SUPPORTED: return "GPU not supported";
    case NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED: return "IOH topology not supported";
    case NVML_P2P_STATUS_DISABLED_BY_REGKEY: return "disabled by regkey";
    case NVML_P2P_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "unknown";
  }
}

// The NVLinks of every GPU: active links to each other GPU and to NVSwitches,
// and the links that are down.
struct NvLinks {
  std::vector<std::vector<unsigned>> to_gpu;  // [a][b]: active links from a to b (positions in gpus())
  std::vector<unsigned> to_switch;            // [a]: active links from a to an NVSwitch
  std::vector<std::string> inactive;          // "GPU0 NVLink 3"
  bool hardware = false;                      // some GPU answered for some link
};

NvLinks readNvLinks(metrics::Nvml& nvml) {
  const auto& gpus = nvml.gpus();
  const size_t n = gpus.size();
  NvLinks links;
  links.to_gpu.assign(n, std::vector<unsigned>(n, 0));
  links.to_switch.assign(n, 0);
  std::vector<std::optional<std::tuple<unsigned, unsigned, unsigned, unsigned>>> bus_ids(n);
  for (size_t b = 0; b < n; ++b) {
    if (auto id = nvml.pciBusId(gpus[b])) bus_ids[b] = parseBusId(*id);
  }
  for (size_t a = 0; a < n; ++a) {
    for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
      auto active = nvml.nvLinkActive(gpus[a], link);
      if (!active) continue;
      links.hardware = true;
      if (!*active) {
        links.inactive.push_back(gpuName(gpus[a]) + " NVLink " + std::to_string(link));
        continue;
      }
      if (nvml.nvLinkRemoteDeviceType(gpus[a], link) == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
        ++links.to_switch[a];
        continue;
      }
      auto remote = nvml.nvLinkRemotePciBusId(gpus[a], link);
      auto remote_id = remote ? parseBusId(*remote) : std::nullopt;
      for (size_t b = 0; b < n && remote_id; ++b) {
        if (b != a && bus_ids[b] == remote_id) ++links.to_gpu[a][b];
      }
    }
  }
  return links;
}

}  // namespace

CheckResult checkTopology(const DoctorContext& ctx) {
  const char* name = "gpu.topology";
  if (ctx.nvml == nullptr) return skip(name, "NVML not available");
  metrics::Nvml& nvml = *ctx.nvml;
  const auto& gpus = nvml.gpus();
  const size_t n = gpus.size();
  if (n == 0) return skip(name, "no GPUs");
  const NvLinks links = readNvLinks(nvml);

  // The matrix: X, NV<k>, or the PCIe/CPU level of the closest common ancestor.
  std::vector<std::vector<std::string>> cell(n, std::vector<std::string>(n));
  std::set<std::string> nv_kinds, pcie_kinds;
  size_t pairs = 0, nv_pairs = 0;
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      if (a == b) {
        cell[a][b] = "X";
        continue;
      }
      // Through NVSwitches every pair is connected by all of a GPU's links.
      unsigned k = links.to_switch[a] > 0 && links.to_switch[b] > 0 ? links.to_switch[a] : links.to_gpu[a][b];
      if (k > 0) {
        cell[a][b] = "NV" + std::to_string(k);
      } else {
        auto level = nvml.topologyCommonAncestor(gpus[a], gpus[b]);
        cell[a][b] = level ? levelName(*level) : "?";
      }
    }
  }
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      ++pairs;
      bool nv = cell[a][b].rfind("NV", 0) == 0 || cell[b][a].rfind("NV", 0) == 0;
      if (nv) {
        ++nv_pairs;
        for (const std::string& c : {cell[a][b], cell[b][a]}) {
          if (c.rfind("NV", 0) == 0) nv_kinds.insert(c);
        }
      } else {
        pcie_kinds.insert(cell[a][b]);
      }
    }
  }

  std::ostringstream detail;
  auto row = [](const std::vector<std::string>& cells) {
    std::string line;
    for (const std::string& text : cells) {
      line += text;
      line.resize(std::max(line.size() + 1, (line.size() + 8) / 8 * 8), ' ');
    }
    return line.substr(0, line.find_last_not_of(' ') + 1) + "\n";
  };
  std::vector<std::string> header = {""};
  for (unsigned gpu : gpus) header.push_back(gpuName(gpu));
  detail << row(header);
  for (size_t a = 0; a < n; ++a) {
    std::vector<std::string> cells = {gpuName(gpus[a])};
    cells.insert(cells.end(), cell[a].begin(), cell[a].end());
    detail << row(cells);
  }

  // P2P of every pair: read access, and NVLink access where they share NVLink.
  std::vector<std::string> problems = links.inactive;
  for (std::string& p : problems) p += " inactive";
  bool p2p_unknown = false;
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      const std::string pair = gpuName(gpus[a]) + "-" + gpuName(gpus[b]);
      std::string line = "P2P " + pair + ":";
      std::vector<std::pair<int, const char*>> caps = {{NVML_P2P_CAPS_INDEX_READ, "read"}};
      if (cell[a][b].rfind("NV", 0) == 0) caps.emplace_back(NVML_P2P_CAPS_INDEX_NVLINK, "nvlink");
      for (auto [index, label] : caps) {
        auto status = nvml.p2pStatus(gpus[a], gpus[b], index);
        line += std::string(" ") + label + " " + (status ? p2pStatusName(*status) : "not readable");
        if (!status) p2p_unknown = true;
        if (status && *status != NVML_P2P_STATUS_OK) {
          problems.push_back(pair + " P2P " + label + " " + p2pStatusName(*status));
        }
      }
      detail << line << "\n";
    }
  }
  for (const std::string& link : links.inactive) detail << link << " inactive\n";

  std::string summary = std::to_string(n) + (n == 1 ? " GPU" : " GPUs");
  auto join = [](const std::set<std::string>& kinds) {
    std::string out;
    for (const auto& kind : kinds) out += (out.empty() ? "" : "/") + kind;
    return out;
  };
  if (n > 1) {
    if (nv_pairs == pairs) {
      summary += ", all pairs NVLink (" + join(nv_kinds) + ")";
    } else if (nv_pairs == 0) {
      summary += ", no NVLink (" + join(pcie_kinds) + ")";
    } else {
      summary += ", NVLink on " + std::to_string(nv_pairs) + " of " + std::to_string(pairs) + " pairs (" +
                 join(nv_kinds) + "; others " + join(pcie_kinds) + ")";
    }
    summary += p2p_unknown ? ", P2P not readable" : ", P2P ok";
  }
  if (!problems.empty()) {
    std::string reason;
    for (size_t i = 0; i < problems.size() && i < 4; ++i) reason += (i == 0 ? "" : "; ") + problems[i];
    if (problems.size() > 4) reason += "; and " + std::to_string(problems.size() - 4) + " more";
    bool links_down = !links.inactive.empty();
    bool p2p_bad = problems.size() > links.inactive.size();
    std::string hint;
    if (links_down) {
      hint += "an inactive NVLink slows every collective: check `nvidia-smi nvlink -s`, reseat the bridge or "
              "baseboard, or reset the GPU";
    }
    if (p2p_bad) {
      hint += std::string(links_down ? "; " : "") +
              "without P2P, NCCL copies through host memory: disable PCIe ACS / the IOMMU for the GPUs (BIOS or "
              "kernel iommu=pt) and check `nvidia-smi topo -p2p r`";
    }
    return warn(name, summary.substr(0, summary.find(", P2P")) + ": " + reason, hint, detail.str());
  }
  return pass(name, summary, detail.str());
}

CheckResult checkFabric(const DoctorContext& ctx) {
  const char* name = "gpu.fabric";
  if (ctx.nvml == nullptr) return skip(name, "NVML not available");
  if (ctx.nvml->gpus().empty()) return skip(name, "no GPUs");
  std::ostringstream detail;
  std::vector<std::string> bad;
  std::set<unsigned> cliques;
  size_t registered = 0;
  for (unsigned gpu : ctx.nvml->gpus()) {
    auto info = ctx.nvml->fabricInfo(gpu);
    if (!info || info->state == NVML_GPU_FABRIC_STATE_NOT_SUPPORTED) continue;
    const std::string label = gpuName(gpu);
    switch (info->state) {
      case NVML_GPU_FABRIC_STATE_NOT_STARTED:
        bad.push_back(label + " fabric registration not started");
        detail << label << " not started\n";
        continue;
      case NVML_GPU_FABRIC_STATE_IN_PROGRESS:
        bad.push_back(label + " fabric registration in progress");
        detail << label << " in progress\n";
        continue;
      case NVML_GPU_FABRIC_STATE_COMPLETED: break;
      default:
        bad.push_back(label + " fabric state " + std::to_string(info->state) + " unknown");
        detail << label << " state " << static_cast<int>(info->state) << "\n";
        continue;
    }
    if (info->status != NVML_SUCCESS) {
      bad.push_back(label + " fabric registration failed: NVML error " + std::to_string(info->status) + " (" +
                    ctx.nvml->errorString(info->status) + ")");
      detail << label << " completed with error " << info->status << "\n";
      continue;
    }
    ++registered;
    cliques.insert(info->clique_id);
    detail << label << " registered, clique " << info->clique_id << ", cluster " << info->cluster_uuid;
    if (info->health_mask && *info->health_mask != 0) detail << ", health mask 0x" << std::hex << *info->health_mask
                                                             << std::dec;
    detail << "\n";
  }
  if (registered == 0 && bad.empty()) return skip(name, "no NVSwitch fabric");
  if (!bad.empty()) {
    std::string reason;
    for (const auto& b : bad) reason += (reason.empty() ? "" : "; ") + b;
    return fail(name, reason,
                "start nvidia-fabricmanager (`systemctl start nvidia-fabricmanager`, its version must match the "
                "driver's) and read its log (/var/log/fabricmanager.log); NCCL cannot use NVLink until it completes",
                detail.str());
  }
  std::string clique_text;
  for (unsigned c : cliques) clique_text += (clique_text.empty() ? "" : ",") + std::to_string(c);
  return pass(name,
              std::to_string(registered) + (registered == 1 ? " GPU" : " GPUs") + " registered with the fabric (clique " +
                  clique_text + ")",
              detail.str());
}

}  // namespace dtrain::doctor
