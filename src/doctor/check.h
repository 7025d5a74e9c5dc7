// Node readiness checks (doctor/): the result of one check and the context
// every check reads the machine through.
//
// A check has a dotted name ("gpu.count", "host.memlock", "rdma.ports"), the
// part before the dot is its group. It returns exactly one CheckResult: PASS,
// WARN, FAIL or SKIP, a one-line reason naming what was found, and for
// anything but PASS a one-line hint saying how to fix it. Per-GPU or per-port
// findings are summarised in the reason (the worst one first) and listed
// in full in `detail` (several lines; the table prints it indented under the
// row, --json as a string).
//
// Checks never touch /proc, /sys or /etc directly: they read through
// ctx.root (common/system_root.h), so tests give fixture trees. Environment
// variables come from ctx.env, NVML from ctx.nvml (nullptr when NVML could
// not be opened: ctx.nvml_error says why).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/system_root.h"

namespace dtrain::gpu {
class Nvml;
}

namespace dtrain::doctor {

enum class Status { kPass, kWarn, kFail, kSkip };
const char* statusName(Status status);  // "PASS", "WARN", "FAIL", "SKIP"

struct CheckResult {
  std::string name;  // "gpu.count"
  Status status = Status::kSkip;
  std::string reason;  // one line
  std::string hint;    // one line; empty on PASS
  std::string detail;  // optional, several lines
};

struct DoctorOptions {
  std::string root = "/";
  std::optional<int> expect_gpus;   // --expect-gpus; else Slurm's GRES count when set
  std::vector<std::string> peers;   // --peers host:port,... (active)
  bool allreduce = false;           // --allreduce: quick all-reduce across local GPUs (active)
  double timeout_seconds = 10;      // per active check
  std::string dtrain_binary;        // /proc/self/exe: the active checks run `dtrain` subcommands
};

struct DoctorContext {
  const SystemRoot& root;
  const std::map<std::string, std::string>& env;
  const DoctorOptions& options;
  gpu::Nvml* nvml = nullptr;  // nullptr: NVML not available
  std::string nvml_error;          // why nvml is nullptr

  // One variable of `env`; nullopt when it is not set.
  std::optional<std::string> envValue(const std::string& name) const {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  }
};

struct CheckSpec {
  std::string name;         // "host.memlock"
  std::string description;  // for `dtrain doctor --list`
  bool active = false;      // runs only when asked for (--peers, --allreduce)
  std::function<CheckResult(const DoctorContext&)> run;
};

// Helpers for checks.
CheckResult pass(std::string name, std::string reason, std::string detail = {});
CheckResult warn(std::string name, std::string reason, std::string hint, std::string detail = {});
CheckResult fail(std::string name, std::string reason, std::string hint, std::string detail = {});
CheckResult skip(std::string name, std::string reason, std::string detail = {});

}  // namespace dtrain::doctor
