#include "doctor/gpu_topology.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <tuple>

#include "doctor/gpu_expected.h"
#include "gpu/nvml.h"

namespace dtrain::doctor {
namespace {

using namespace gpu::nvml_abi;

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

NvLinks readNvLinks(gpu::Nvml& nvml) {
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

// [a][b]: "X" on the diagonal, "NV<k>" for k NVLinks, else the PCIe/CPU
// level of the closest common ancestor ("PIX", "SYS", ...).
using LinkMatrix = std::vector<std::vector<std::string>>;

bool isNvLink(const std::string& cell) { return cell.rfind("NV", 0) == 0; }

LinkMatrix linkMatrix(gpu::Nvml& nvml, const NvLinks& links) {
  const auto& gpus = nvml.gpus();
  const size_t n = gpus.size();
  LinkMatrix cell(n, std::vector<std::string>(n));
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
  return cell;
}

// How the pairs of GPUs are connected: how many share NVLink, and the kinds
// of link seen ("NV4", "NV18"; "PIX", "SYS").
struct PairKinds {
  size_t pairs = 0;
  size_t nv_pairs = 0;
  std::set<std::string> nv_kinds;
  std::set<std::string> pcie_kinds;
};

PairKinds pairKinds(const LinkMatrix& cell) {
  PairKinds kinds;
  for (size_t a = 0; a < cell.size(); ++a) {
    for (size_t b = a + 1; b < cell.size(); ++b) {
      ++kinds.pairs;
      if (isNvLink(cell[a][b]) || isNvLink(cell[b][a])) {
        ++kinds.nv_pairs;
        for (const std::string& c : {cell[a][b], cell[b][a]}) {
          if (isNvLink(c)) kinds.nv_kinds.insert(c);
        }
      } else {
        kinds.pcie_kinds.insert(cell[a][b]);
      }
    }
  }
  return kinds;
}

// The matrix as `nvidia-smi topo -m` prints it: columns on 8-character stops.
std::string matrixText(const std::vector<unsigned>& gpus, const LinkMatrix& cell) {
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
  std::string text = row(header);
  for (size_t a = 0; a < gpus.size(); ++a) {
    std::vector<std::string> cells = {gpuName(gpus[a])};
    cells.insert(cells.end(), cell[a].begin(), cell[a].end());
    text += row(cells);
  }
  return text;
}

// P2P of every pair: read access, and NVLink access where they share NVLink.
struct P2pFindings {
  std::string detail;                 // one "P2P GPU0-GPU1: read ok nvlink ok" line per pair
  std::vector<std::string> problems;  // "GPU0-GPU1 P2P read not supported"
  bool unknown = false;               // some status could not be read
};

P2pFindings readP2p(gpu::Nvml& nvml, const LinkMatrix& cell) {
  const auto& gpus = nvml.gpus();
  P2pFindings found;
  for (size_t a = 0; a < gpus.size(); ++a) {
    for (size_t b = a + 1; b < gpus.size(); ++b) {
      const std::string pair = gpuName(gpus[a]) + "-" + gpuName(gpus[b]);
      std::string line = "P2P " + pair + ":";
      std::vector<std::pair<int, const char*>> caps = {{NVML_P2P_CAPS_INDEX_READ, "read"}};
      if (isNvLink(cell[a][b])) caps.emplace_back(NVML_P2P_CAPS_INDEX_NVLINK, "nvlink");
      for (auto [index, label] : caps) {
        auto status = nvml.p2pStatus(gpus[a], gpus[b], index);
        line += std::string(" ") + label + " " + (status ? p2pStatusName(*status) : "not readable");
        if (!status) found.unknown = true;
        if (status && *status != NVML_P2P_STATUS_OK) {
          found.problems.push_back(pair + " P2P " + label + " " + p2pStatusName(*status));
        }
      }
      found.detail += line + "\n";
    }
  }
  return found;
}

// "8 GPUs, all pairs NVLink (NV18), P2P ok".
std::string topologySummary(size_t n, const PairKinds& kinds, bool p2p_unknown) {
  std::string summary = std::to_string(n) + (n == 1 ? " GPU" : " GPUs");
  if (n <= 1) return summary;
  auto join = [](const std::set<std::string>& set) {
    std::string out;
    for (const auto& kind : set) out += (out.empty() ? "" : "/") + kind;
    return out;
  };
  if (kinds.nv_pairs == kinds.pairs) {
    summary += ", all pairs NVLink (" + join(kinds.nv_kinds) + ")";
  } else if (kinds.nv_pairs == 0) {
    summary += ", no NVLink (" + join(kinds.pcie_kinds) + ")";
  } else {
    summary += ", NVLink on " + std::to_string(kinds.nv_pairs) + " of " + std::to_string(kinds.pairs) +
               " pairs (" + join(kinds.nv_kinds) + "; others " + join(kinds.pcie_kinds) + ")";
  }
  return summary + (p2p_unknown ? ", P2P not readable" : ", P2P ok");
}

// The first four problems, and how many more.
std::string problemsText(const std::vector<std::string>& problems) {
  std::string reason;
  for (size_t i = 0; i < problems.size() && i < 4; ++i) reason += (i == 0 ? "" : "; ") + problems[i];
  if (problems.size() > 4) reason += "; and " + std::to_string(problems.size() - 4) + " more";
  return reason;
}

std::string topologyHint(bool links_down, bool p2p_bad) {
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
  return hint;
}

}  // namespace

CheckResult checkTopology(const DoctorContext& ctx) {
  const char* name = "gpu.topology";
  if (ctx.nvml == nullptr) return skip(name, "NVML not available");
  gpu::Nvml& nvml = *ctx.nvml;
  const size_t n = nvml.gpus().size();
  if (n == 0) return skip(name, "no GPUs");
  const NvLinks links = readNvLinks(nvml);
  const LinkMatrix cell = linkMatrix(nvml, links);
  const P2pFindings p2p = readP2p(nvml, cell);

  std::string detail = matrixText(nvml.gpus(), cell) + p2p.detail;
  for (const std::string& link : links.inactive) detail += link + " inactive\n";
  const std::string summary = topologySummary(n, pairKinds(cell), p2p.unknown);

  std::vector<std::string> problems = links.inactive;
  for (std::string& p : problems) p += " inactive";
  problems.insert(problems.end(), p2p.problems.begin(), p2p.problems.end());
  if (problems.empty()) return pass(name, summary, detail);
  const std::string hint = topologyHint(!links.inactive.empty(), !p2p.problems.empty());
  return warn(name, summary.substr(0, summary.find(", P2P")) + ": " + problemsText(problems), hint, detail);
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
