// host.socket_buffers, host.memlock, host.shm, host.selinux, host.firewall,
// host.time_sync.
#include <sys/statvfs.h>
#include <sys/timex.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "common/error.h"
#include "common/units.h"
#include "doctor/host_check_functions.h"

namespace dtrain::doctor {
namespace {

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  std::string word;
  while (in >> word) out.push_back(word);
  return out;
}

std::optional<long long> parseNonNegative(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  errno = 0;
  long long value = std::strtoll(text.c_str(), nullptr, 10);
  if (errno != 0) return std::nullopt;
  return value;
}

std::string mib(long long bytes) {
  std::ostringstream out;
  out.precision(bytes >= (1LL << 30) ? 3 : 4);
  if (bytes >= (1LL << 30)) {
    out << static_cast<double>(bytes) / (1LL << 30) << " GiB";
  } else {
    out << static_cast<double>(bytes) / (1LL << 20) << " MiB";
  }
  return out.str();
}

// The tmpfs size option: "65536k", "8g", "1073741824"; nullopt for anything
// else ("50%" is a share of RAM: the caller asks statvfs instead).
std::optional<long long> parseTmpfsSize(const std::string& text) {
  if (text.empty()) return std::nullopt;
  long long multiplier = 1;
  std::string digits = text;
  switch (text.back()) {
    case 'k': case 'K': multiplier = 1LL << 10; digits.pop_back(); break;
    case 'm': case 'M': multiplier = 1LL << 20; digits.pop_back(); break;
    case 'g': case 'G': multiplier = 1LL << 30; digits.pop_back(); break;
    case 't': case 'T': multiplier = 1LL << 40; digits.pop_back(); break;
    default: break;
  }
  auto value = parseNonNegative(digits);
  if (!value) return std::nullopt;
  return *value * multiplier;
}

}  // namespace

CheckResult checkSocketBuffers(const DoctorContext& ctx) {
  const std::string name = "host.socket_buffers";
  struct Setting {
    const char* sysctl;
    const char* file;
    bool triple;  // "min default max": the max field counts
  };
  const Setting settings[] = {
      {"net.core.rmem_max", "/proc/sys/net/core/rmem_max", false},
      {"net.core.wmem_max", "/proc/sys/net/core/wmem_max", false},
      {"net.ipv4.tcp_rmem", "/proc/sys/net/ipv4/tcp_rmem", true},
      {"net.ipv4.tcp_wmem", "/proc/sys/net/ipv4/tcp_wmem", true},
  };
  std::vector<std::string> low, unreadable, fixes, detail;
  for (const Setting& setting : settings) {
    auto line = ctx.root.readLine(setting.file);
    std::vector<std::string> fields = line ? words(*line) : std::vector<std::string>{};
    std::optional<long long> value;
    if (fields.size() == (setting.triple ? 3u : 1u)) value = parseNonNegative(fields.back());
    if (!value) {
      unreadable.push_back(ctx.root.path(setting.file));
      detail.push_back(std::string(setting.sysctl) + ": unreadable (" + ctx.root.path(setting.file) + ")");
      continue;
    }
    std::string shown;
    for (const std::string& field : fields) shown += (shown.empty() ? "" : " ") + field;
    detail.push_back(std::string(setting.sysctl) + " = " + shown);
    if (*value >= kSocketBufferMinBytes) continue;
    low.push_back(std::string(setting.sysctl) + (setting.triple ? " max " : " ") + std::to_string(*value));
    if (setting.triple) {
      fixes.push_back(std::string("'") + setting.sysctl + "=" + fields[0] + " " + fields[1] + " " +
                      std::to_string(kSocketBufferMinBytes) + "'");
    } else {
      fixes.push_back(std::string(setting.sysctl) + "=" + std::to_string(kSocketBufferMinBytes));
    }
  }
  auto join = [](const std::vector<std::string>& items, const char* sep) {
    std::string text;
    for (const std::string& item : items) text += (text.empty() ? "" : sep) + item;
    return text;
  };
  if (!low.empty()) {
    std::string fix_list = join(fixes, " ");
    return warn(name, join(low, ", ") + " below " + std::to_string(kSocketBufferMinBytes) + " (128 MiB)",
                "sysctl -w " + fix_list + " (persist the same lines in /etc/sysctl.d/90-dtrain.conf)",
                join(detail, "\n"));
  }
  if (!unreadable.empty()) {
    return skip(name, "cannot read " + join(unreadable, ", "), join(detail, "\n"));
  }
  return pass(name, "socket buffer limits >= 128 MiB (rmem_max, wmem_max, tcp_rmem, tcp_wmem)", join(detail, "\n"));
}

CheckResult checkMemlock(const DoctorContext& ctx) {
  const std::string name = "host.memlock";
  const std::string file = "/proc/self/limits";
  auto text = ctx.root.read(file);
  if (!text) return skip(name, "cannot read " + ctx.root.path(file));
  const std::string label = "Max locked memory";
  std::istringstream in(*text);
  std::string line;
  std::optional<std::string> soft;
  while (std::getline(in, line)) {
    if (line.rfind(label, 0) != 0) continue;
    auto fields = words(line.substr(label.size()));
    if (!fields.empty()) soft = fields[0];
  }
  if (!soft) return skip(name, "no \"" + label + "\" line in " + ctx.root.path(file));
  if (*soft == "unlimited") return pass(name, "max locked memory is unlimited");
  auto bytes = parseNonNegative(*soft);
  if (!bytes) return skip(name, "unexpected max locked memory '" + *soft + "' in " + ctx.root.path(file));
  const std::string hint =
      "ulimit -l unlimited; for good: '* - memlock unlimited' in /etc/security/limits.conf, "
      "LimitMEMLOCK=infinity for slurmd/containerd (systemd), and PropagateResourceLimits=NONE or "
      "-MEMLOCK in slurm.conf";
  std::string found = "max locked memory is " + std::to_string(*bytes) + " bytes (" +
                      formatByteSize(static_cast<uint64_t>(*bytes)) + ")";
  auto devices = rdmaDevices(ctx);
  if (!devices.empty()) {
    return fail(name, found + " with " + std::to_string(devices.size()) +
                          " RDMA device(s): NCCL cannot register its buffers with the NIC",
                hint);
  }
  return warn(name, found + " (no RDMA devices: matters once NCCL uses InfiniBand/RoCE)", hint);
}

CheckResult checkShm(const DoctorContext& ctx) {
  const std::string name = "host.shm";
  const std::string file = "/proc/mounts";
  auto text = ctx.root.read(file);
  if (!text) return skip(name, "cannot read " + ctx.root.path(file));
  // The last mount on /dev/shm is the one in effect.
  std::optional<std::string> options, fstype;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    auto fields = words(line);
    if (fields.size() >= 4 && fields[1] == "/dev/shm") {
      fstype = fields[2];
      options = fields[3];
    }
  }
  const std::string hint =
      "mount -o remount,size=16G /dev/shm (Docker: --shm-size=16g; Kubernetes: an emptyDir with medium: Memory "
      "mounted at /dev/shm)";
  if (!options) return warn(name, "/dev/shm is not mounted: NCCL's shared-memory transport needs it", hint);
  std::optional<long long> size;
  std::string source = "size=";
  std::istringstream opts(*options);
  std::string option;
  while (std::getline(opts, option, ',')) {
    if (option.rfind("size=", 0) == 0) {
      source += option.substr(5);
      size = parseTmpfsSize(option.substr(5));
    }
  }
  if (!size) {
    struct statvfs st {};
    if (::statvfs(ctx.root.path("/dev/shm").c_str(), &st) != 0) {
      return skip(name, "/dev/shm is mounted (" + *fstype + ") but its size is unknown: statvfs " +
                            ctx.root.path("/dev/shm") + ": " + errnoString(errno));
    }
    size = static_cast<long long>(st.f_blocks) * static_cast<long long>(st.f_frsize);
    source = "statvfs";
  }
  std::string found = "/dev/shm is " + mib(*size) + " (" + source + ")";
  if (*size <= kShmFailBytes) {
    return fail(name, found + ": NCCL's shared-memory transport fails at or below 64 MiB", hint);
  }
  if (*size < kShmWarnBytes) return warn(name, found + ": below 1 GiB, too small for several GPUs per node", hint);
  return pass(name, found);
}

CheckResult checkSelinux(const DoctorContext& ctx) {
  const std::string name = "host.selinux";
  const std::string file = "/sys/fs/selinux/enforce";
  if (!ctx.root.exists(file)) return pass(name, "SELinux not enabled");
  auto mode = ctx.root.readLine(file);
  if (mode && *mode == "0") return pass(name, "SELinux permissive");
  if (mode && *mode == "1") {
    return warn(name, "SELinux enforcing: it may deny the job's sockets, shared memory or /dev/infiniband",
                "check `ausearch -m avc -ts recent` after a run; allow what was denied (audit2allow) or "
                "`setenforce 0`");
  }
  return skip(name, "unexpected content in " + ctx.root.path(file) + " (expected 0 or 1)");
}

CheckResult checkFirewall(const DoctorContext& ctx) {
  const std::string name = "host.firewall";
  std::vector<std::string> found;
  for (const char* file : {"/proc/net/ip_tables_names", "/proc/net/ip6_tables_names"}) {
    auto text = ctx.root.read(file);
    if (!text) continue;
    auto tables = words(*text);
    if (tables.empty()) continue;
    std::string list;
    for (const std::string& table : tables) list += (list.empty() ? "" : " ") + table;
    found.push_back(std::string(file).find("ip6") != std::string::npos ? "ip6tables: " + list
                                                                         : "iptables: " + list);
  }
  if (auto modules = ctx.root.read("/proc/modules")) {
    std::istringstream in(*modules);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("nf_tables ", 0) == 0) found.push_back("nf_tables module loaded");
    }
  }
  if (found.empty()) return pass(name, "no packet filter tables loaded");
  std::string list;
  for (const std::string& item : found) list += (list.empty() ? "" : "; ") + item;
  return warn(name, "packet filter active (" + list + ")",
              "allow TCP between the nodes on the rendezvous/store port (--master-port, 29500 by default) and "
              "NCCL's ports (ephemeral: net.ipv4.ip_local_port_range), e.g. "
              "`iptables -I INPUT -s <cluster subnet> -j ACCEPT`; list the rules with `nft list ruleset`");
}

KernelClockState readKernelClock() {
  struct timex tx {};
  tx.modes = 0;
  int state = ::ntp_adjtime(&tx);
  if (state == -1) throw errnoError("ntp_adjtime", errno);
  KernelClockState clock;
  clock.unsynchronized = (tx.status & STA_UNSYNC) != 0 || state == TIME_ERROR;
  clock.max_error_us = tx.maxerror;
  clock.est_error_us = tx.esterror;
  return clock;
}

CheckResult checkTimeSync(const DoctorContext& ctx) {
  if (!ctx.root.isLive()) {
    return skip("host.time_sync", "--root " + ctx.root.root() +
                                      " is a fixture tree; the kernel clock is this machine's, not the tree's");
  }
  return checkTimeSync(ctx, readKernelClock);
}

CheckResult checkTimeSync(const DoctorContext& /*ctx*/, const KernelClockProbe& probe) {
  const std::string name = "host.time_sync";
  KernelClockState clock = probe();
  const std::string hint =
      "run a time service: `systemctl enable --now chronyd` (or ntpd / systemd-timesyncd) and check `chronyc "
      "tracking`";
  std::ostringstream errors;
  errors << "estimated error " << clock.est_error_us << " us, maximum error " << clock.max_error_us << " us";
  if (clock.unsynchronized) {
    return warn(name, "kernel clock not synchronised (STA_UNSYNC); " + errors.str(), hint);
  }
  if (clock.max_error_us > kClockMaxErrorMicros) {
    return warn(name, "kernel clock maximum error " + std::to_string(clock.max_error_us / 1000) +
                          " ms exceeds 100 ms; " + errors.str(),
                hint);
  }
  return pass(name, "kernel clock synchronised; " + errors.str());
}

}  // namespace dtrain::doctor
