// The host, RDMA, NCCL-environment and peer checks one by one (doctor/),
// for addHostChecks and for tests that call a check on a fixture tree.
// Each reads the machine only through ctx.root and ctx.env; thresholds and
// where they come from are listed in docs/doctor.md.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "doctor/check.h"

namespace dtrain::doctor {

// net.core.{r,w}mem_max and the max field of net.ipv4.tcp_{r,w}mem: 128 MiB,
// ESnet's host tuning for 10-40 Gbit/s paths.
constexpr long long kSocketBufferMinBytes = 134217728;
// /dev/shm: at or below this NCCL's shared-memory transport fails to create
// its segments (Docker's default --shm-size is 64 MiB).
constexpr long long kShmFailBytes = 64LL << 20;
constexpr long long kShmWarnBytes = 1LL << 30;
// Kernel clock: an estimated maximum error above this is not synchronised
// well enough for comparing timelines of several nodes.
constexpr long kClockMaxErrorMicros = 100'000;

CheckResult checkSocketBuffers(const DoctorContext& ctx);
CheckResult checkMemlock(const DoctorContext& ctx);
CheckResult checkShm(const DoctorContext& ctx);
CheckResult checkSelinux(const DoctorContext& ctx);
CheckResult checkFirewall(const DoctorContext& ctx);

// What adjtimex(2) says about the kernel clock.
struct KernelClockState {
  bool unsynchronized = false;  // STA_UNSYNC, or the TIME_ERROR clock state
  long max_error_us = 0;        // timex.maxerror
  long est_error_us = 0;        // timex.esterror
};
// Throws IoError when the call fails.
using KernelClockProbe = std::function<KernelClockState()>;
KernelClockState readKernelClock();  // ntp_adjtime with modes = 0: needs no privileges
// The live kernel's clock; SKIP when ctx.root is a fixture tree (its kernel
// is not the fixture's).
CheckResult checkTimeSync(const DoctorContext& ctx);
// The clock `probe` reports, whatever the root.
CheckResult checkTimeSync(const DoctorContext& ctx, const KernelClockProbe& probe);

CheckResult checkNuma(const DoctorContext& ctx);

// The RDMA devices under /sys/class/infiniband, sorted.
std::vector<std::string> rdmaDevices(const DoctorContext& ctx);
CheckResult checkRdmaPorts(const DoctorContext& ctx);
CheckResult checkGpuDirect(const DoctorContext& ctx);

// NCCL's list syntax for NCCL_SOCKET_IFNAME and NCCL_IB_HCA: a leading '^'
// excludes the listed names, then a leading '=' makes them exact names
// instead of prefixes; items are "name" or "name:port".
struct NcclNameList {
  bool exclude = false;
  bool exact = false;
  struct Item {
    std::string name;
    std::optional<int> port;
    std::string text;  // as written
  };
  std::vector<Item> items;
  bool matches(const Item& item, const std::string& candidate) const;
};
// ConfigError naming `variable` on an empty item or a port that is not a
// positive integer.
NcclNameList parseNcclNameList(const std::string& value, const std::string& variable);

CheckResult checkSocketIfname(const DoctorContext& ctx);
CheckResult checkIbHca(const DoctorContext& ctx);
CheckResult checkDebugEnv(const DoctorContext& ctx);

// peers.reachable: each --peers entry served by `dtrain doctor --serve-peer`.
CheckResult checkPeersReachable(const DoctorContext& ctx);

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; nullopt when malformed.
std::optional<std::vector<int>> parseCpuList(const std::string& text);

}  // namespace dtrain::doctor
