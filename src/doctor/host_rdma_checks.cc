// rdma.ports and rdma.gpudirect: the InfiniBand/RoCE ports under
// /sys/class/infiniband and the module that lets the NIC read GPU memory.
#include <sstream>

#include "doctor/host_check_functions.h"

namespace dtrain::doctor {
namespace {

// "4: ACTIVE" -> "ACTIVE", "5: LinkUp" -> "LinkUp".
std::string stripNumber(const std::string& text) {
  size_t colon = text.find(": ");
  return colon == std::string::npos ? text : text.substr(colon + 2);
}

struct PortState {
  std::string id;  // "mlx5_0/1"
  std::string state, phys_state, rate, link_layer;
  bool up() const { return state == "ACTIVE" && phys_state == "LinkUp"; }
  std::string text() const {
    std::string line = id + " " + state;
    if (!up()) line += " (" + phys_state + ")";
    if (!rate.empty()) line += " " + rate;
    return line;
  }
};

std::vector<PortState> readPorts(const DoctorContext& ctx, std::vector<std::string>& portless) {
  std::vector<PortState> ports;
  for (const std::string& device : rdmaDevices(ctx)) {
    const std::string dir = "/sys/class/infiniband/" + device + "/ports";
    auto numbers = ctx.root.list(dir);
    if (numbers.empty()) portless.push_back(device);
    for (const std::string& number : numbers) {
      auto field = [&](const char* file) {
        auto line = ctx.root.readLine(dir + "/" + number + "/" + file);
        return line ? stripNumber(*line) : std::string("unreadable");
      };
      PortState port;
      port.id = device + "/" + number;
      port.state = field("state");
      port.phys_state = field("phys_state");
      auto rate = ctx.root.readLine(dir + "/" + number + "/rate");
      port.rate = rate ? *rate : "";
      port.link_layer = field("link_layer");
      ports.push_back(port);
    }
  }
  return ports;
}

}  // namespace

std::vector<std::string> rdmaDevices(const DoctorContext& ctx) { return ctx.root.list("/sys/class/infiniband"); }

CheckResult checkRdmaPorts(const DoctorContext& ctx) {
  const std::string name = "rdma.ports";
  if (rdmaDevices(ctx).empty()) return skip(name, "no RDMA devices: NCCL uses TCP sockets");
  std::vector<std::string> portless;
  std::vector<PortState> ports = readPorts(ctx, portless);
  std::string detail;
  std::vector<std::string> up, down;
  for (const PortState& port : ports) {
    detail += port.text() + ", phys_state " + port.phys_state + ", link_layer " + port.link_layer + "\n";
    (port.up() ? up : down).push_back(port.text());
  }
  for (const std::string& device : portless) detail += device + ": no ports listed\n";
  auto join = [](const std::vector<std::string>& items) {
    std::string text;
    for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
    return text;
  };
  const std::string hint =
      "check the cable and the switch port (`ibstat`, `ibstatus`); a port stuck in INIT/POLLING needs the "
      "subnet manager (`systemctl status opensm`); exclude a dead port with NCCL_IB_HCA=^<dev>:<port>";
  if (up.empty()) {
    return fail(name, "no RDMA port is active" + (down.empty() ? std::string() : ": " + join(down)), hint, detail);
  }
  if (!down.empty()) {
    return warn(name,
                std::to_string(down.size()) + " of " + std::to_string(ports.size()) + " RDMA ports down: " +
                    join(down),
                hint, detail);
  }
  return pass(name, std::to_string(up.size()) + " RDMA port(s) ACTIVE/LinkUp: " + join(up), detail);
}

CheckResult checkGpuDirect(const DoctorContext& ctx) {
  const std::string name = "rdma.gpudirect";
  for (const char* module : {"nvidia_peermem", "nv_peer_mem"}) {
    if (ctx.root.exists(std::string("/sys/module/") + module)) {
      return pass(name, std::string(module) + " loaded: the NIC reads and writes GPU memory directly");
    }
  }
  if (rdmaDevices(ctx).empty()) return skip(name, "no RDMA devices");
  return warn(name,
              "RDMA devices but neither nvidia_peermem nor nv_peer_mem is loaded: unless NCCL can use DMA-BUF "
              "(Linux >= 5.12, open GPU kernel modules), inter-node traffic is staged through host memory",
              "modprobe nvidia_peermem (and add it to /etc/modules-load.d/)");
}

}  // namespace dtrain::doctor
