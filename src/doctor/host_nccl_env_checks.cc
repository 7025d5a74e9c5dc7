// nccl.socket_ifname, nccl.ib_hca, nccl.debug_env: NCCL's environment
// against the interfaces and devices this node has.
#include <algorithm>
#include <cctype>

#include "common/error.h"
#include "doctor/host_check_functions.h"

namespace dtrain::doctor {
namespace {

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : sep) + item;
  return text;
}

std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::toupper(c); });
  return text;
}

// Interfaces under /sys/class/net that carry traffic: operstate "up", or
// "unknown" (loopback and virtual interfaces that do not report a state).
std::vector<std::string> upInterfaces(const DoctorContext& ctx, std::string& detail) {
  std::vector<std::string> up;
  for (const std::string& name : ctx.root.list("/sys/class/net")) {
    auto state = ctx.root.readLine("/sys/class/net/" + name + "/operstate");
    detail += name + ": " + (state ? *state : std::string("operstate unreadable")) + "\n";
    if (state && (*state == "up" || *state == "unknown")) up.push_back(name);
  }
  return up;
}

}  // namespace

bool NcclNameList::matches(const Item& item, const std::string& candidate) const {
  if (exact) return candidate == item.name;
  return candidate.compare(0, item.name.size(), item.name) == 0;
}

NcclNameList parseNcclNameList(const std::string& value, const std::string& variable) {
  NcclNameList list;
  std::string rest = value;
  if (!rest.empty() && rest[0] == '^') {
    list.exclude = true;
    rest.erase(0, 1);
  }
  if (!rest.empty() && rest[0] == '=') {
    list.exact = true;
    rest.erase(0, 1);
  }
  const std::string expected = "; expected [^][=]name[:port][,name[:port]...]";
  size_t begin = 0;
  while (true) {
    size_t comma = rest.find(',', begin);
    std::string text = rest.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (text.empty()) {
      throw ConfigError(variable + "='" + value + "': empty item " + std::to_string(list.items.size() + 1) + expected);
    }
    NcclNameList::Item item;
    item.text = text;
    size_t colon = text.find(':');
    item.name = text.substr(0, colon);
    if (colon != std::string::npos) {
      std::string port = text.substr(colon + 1);
      if (port.empty() || port.size() > 4 || port.find_first_not_of("0123456789") != std::string::npos ||
          std::stoi(port) < 1) {
        throw ConfigError(variable + "='" + value + "': item '" + text + "' has port '" + port +
                          "', not a positive integer" + expected);
      }
      item.port = std::stoi(port);
    }
    if (item.name.empty()) {
      throw ConfigError(variable + "='" + value + "': item '" + text + "' has no name" + expected);
    }
    list.items.push_back(item);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return list;
}

CheckResult checkSocketIfname(const DoctorContext& ctx) {
  const std::string name = "nccl.socket_ifname";
  auto value = ctx.envValue("NCCL_SOCKET_IFNAME");
  if (!value || value->empty()) return pass(name, "NCCL_SOCKET_IFNAME unset: NCCL chooses an interface");
  NcclNameList list;
  try {
    list = parseNcclNameList(*value, "NCCL_SOCKET_IFNAME");
  } catch (const ConfigError& e) {
    return fail(name, e.message(), "export NCCL_SOCKET_IFNAME=eth0 (a prefix), =eth0 (exact) or ^docker,lo (exclude)");
  }
  std::string detail;
  std::vector<std::string> up = upInterfaces(ctx, detail);
  const std::string up_text = up.empty() ? "none" : join(up);
  const std::string hint = "set NCCL_SOCKET_IFNAME to the interface that carries traffic between the nodes (up: " +
                           up_text + "; see `ip -br link`)";
  if (list.exclude) {
    std::vector<std::string> left;
    for (const std::string& iface : up) {
      bool excluded = std::any_of(list.items.begin(), list.items.end(),
                                  [&](const NcclNameList::Item& item) { return list.matches(item, iface); });
      if (!excluded) left.push_back(iface);
    }
    if (left.empty()) {
      return fail(name, "NCCL_SOCKET_IFNAME=" + *value + " excludes every interface that is up (" + up_text + ")",
                  hint, detail);
    }
    return pass(name, "NCCL_SOCKET_IFNAME=" + *value + " leaves " + join(left), detail);
  }
  std::vector<std::string> unmatched, matched;
  for (const NcclNameList::Item& item : list.items) {
    std::vector<std::string> hits;
    for (const std::string& iface : up) {
      if (list.matches(item, iface)) hits.push_back(iface);
    }
    if (hits.empty()) {
      unmatched.push_back(item.name);
    } else {
      matched.push_back(item.name + " -> " + join(hits));
    }
  }
  if (!unmatched.empty()) {
    return fail(name,
                "NCCL_SOCKET_IFNAME=" + *value + ": " + join(unmatched) + " match" +
                    (unmatched.size() == 1 ? "es" : "") + " no interface that is up (up: " + up_text + ")",
                hint, detail);
  }
  return pass(name, "NCCL_SOCKET_IFNAME=" + *value + ": " + join(matched, "; "), detail);
}

CheckResult checkIbHca(const DoctorContext& ctx) {
  const std::string name = "nccl.ib_hca";
  std::vector<std::string> devices = rdmaDevices(ctx);
  auto value = ctx.envValue("NCCL_IB_HCA");
  if (!value || value->empty()) {
    if (devices.empty()) return skip(name, "NCCL_IB_HCA unset and no RDMA devices");
    return pass(name, "NCCL_IB_HCA unset: NCCL uses every RDMA device (" + join(devices) + ")");
  }
  const std::string devices_text = devices.empty() ? "none" : join(devices);
  const std::string hint =
      "set NCCL_IB_HCA to devices that exist (`ibv_devices`; here: " + devices_text + "), e.g. =mlx5_0:1,mlx5_1:1";
  NcclNameList list;
  try {
    list = parseNcclNameList(*value, "NCCL_IB_HCA");
  } catch (const ConfigError& e) {
    return fail(name, e.message(), hint);
  }
  auto portExists = [&](const std::string& device, int port) {
    return ctx.root.exists("/sys/class/infiniband/" + device + "/ports/" + std::to_string(port));
  };
  if (list.exclude) {
    std::vector<std::string> left;
    for (const std::string& device : devices) {
      bool excluded = std::any_of(list.items.begin(), list.items.end(), [&](const NcclNameList::Item& item) {
        return list.matches(item, device) && !item.port;
      });
      if (!excluded) left.push_back(device);
    }
    if (left.empty()) {
      return fail(name, "NCCL_IB_HCA=" + *value + " excludes every RDMA device (" + devices_text + ")", hint);
    }
    return pass(name, "NCCL_IB_HCA=" + *value + " leaves " + join(left));
  }
  std::vector<std::string> missing, found;
  for (const NcclNameList::Item& item : list.items) {
    std::vector<std::string> hits;
    for (const std::string& device : devices) {
      if (!list.matches(item, device)) continue;
      if (item.port && !portExists(device, *item.port)) continue;
      hits.push_back(item.port ? device + ":" + std::to_string(*item.port) : device);
    }
    if (hits.empty()) {
      missing.push_back(item.text);
    } else {
      found.push_back(item.text + " -> " + join(hits));
    }
  }
  if (!missing.empty()) {
    return fail(name, "NCCL_IB_HCA=" + *value + ": no such RDMA device or port: " + join(missing) +
                          " (devices: " + devices_text + ")",
                hint);
  }
  return pass(name, "NCCL_IB_HCA=" + *value + ": " + join(found, "; "));
}

CheckResult checkDebugEnv(const DoctorContext& ctx) {
  const std::string name = "nccl.debug_env";
  std::vector<std::string> found, names;
  auto note = [&](const std::string& variable, const std::string& value, const std::string& why) {
    found.push_back(variable + "=" + value + " (" + why + ")");
    names.push_back(variable);
  };
  auto get = [&](const char* variable) { return ctx.envValue(variable).value_or(""); };
  std::string debug = upper(get("NCCL_DEBUG"));
  if (debug == "INFO" || debug == "TRACE") {
    note("NCCL_DEBUG", get("NCCL_DEBUG"), "every rank logs each connection and collective setup");
  }
  if (ctx.envValue("NCCL_DEBUG_SUBSYS")) {
    note("NCCL_DEBUG_SUBSYS", get("NCCL_DEBUG_SUBSYS"), "debug logging of NCCL subsystems");
  }
  if (get("NCCL_P2P_DISABLE") == "1") {
    note("NCCL_P2P_DISABLE", "1", "GPU-to-GPU traffic bypasses NVLink/PCIe peer access and goes through host memory");
  }
  if (get("NCCL_SHM_DISABLE") == "1") {
    note("NCCL_SHM_DISABLE", "1", "traffic inside the node falls back to the network transport");
  }
  if (get("NCCL_IB_DISABLE") == "1" && !rdmaDevices(ctx).empty()) {
    note("NCCL_IB_DISABLE", "1", "RDMA devices are present but NCCL uses TCP sockets between nodes");
  }
  if (ctx.envValue("NCCL_CHECKS_DISABLE")) {
    note("NCCL_CHECKS_DISABLE", get("NCCL_CHECKS_DISABLE"),
         "a debugging switch, deprecated since NCCL 2.2: argument errors turn into hangs or corrupt results");
  }
  if (get("CUDA_LAUNCH_BLOCKING") == "1") {
    note("CUDA_LAUNCH_BLOCKING", "1", "every kernel launch waits for the GPU: no overlap of compute and communication");
  }
  for (const char* variable : {"NCCL_BLOCKING_WAIT", "TORCH_NCCL_BLOCKING_WAIT"}) {
    if (get(variable) == "1") {
      note(variable, "1", "the host thread waits for each collective instead of queueing the next step's work");
    }
  }
  if (found.empty()) return pass(name, "no debugging or slowing NCCL/CUDA variables set");
  return warn(name, join(names) + " set: these cost speed or are for debugging only",
              "unset " + join(names, " ") + " for production runs", join(found, "\n"));
}

}  // namespace dtrain::doctor
