// The `dtrain doctor` runner (doctor/): which checks exist, which of them a
// run selects, running them so that no check can crash the run, and the
// exit code of the run.
//
// Selection: `--check LIST` keeps only the named checks, `--skip LIST` drops
// named ones; a LIST is a comma list of full names ("host.memlock") or group
// names ("host"). An unknown name is a ConfigError listing the valid ones.
// Active checks (CheckSpec::active) run only when their option is given:
// "peers.*" with --peers, the active "gpu.*" checks with --allreduce;
// otherwise they are left out of the selection (and of the report) entirely.
//
// Exit code: 2 when any check FAILed, 1 when a check WARNed and the run is
// strict, else 0. Bad input (ConfigError) exits 2 in the CLI.
#pragma once

#include <string>
#include <vector>

#include "doctor/check.h"

namespace dtrain::doctor {

// Every check, GPU checks first, then host, RDMA, NCCL-environment and peer
// checks, in the order the table prints them.
std::vector<CheckSpec> allChecks();

// The comma list `text` split into trimmed items; an empty item (",," or a
// trailing comma) is a ConfigError naming `flag`.
std::vector<std::string> splitNameList(const std::string& text, const std::string& flag);

// The checks of `all` that this run executes, in their order. `check` and
// `skip` are the items of --check and --skip (empty `check`: all). Naming an
// active check (or a group of only active checks) explicitly in --check
// without its option is a ConfigError saying which option it needs.
std::vector<CheckSpec> selectChecks(const std::vector<CheckSpec>& all, const std::vector<std::string>& check,
                                    const std::vector<std::string>& skip, const DoctorOptions& options);

// Whether the option an active check needs was given (always true for a
// check that is not active).
bool activeCheckRequested(const CheckSpec& spec, const DoctorOptions& options);
// The option that runs an active check: "--peers HOST:PORT[,HOST:PORT...]"
// for "peers.*", "--allreduce" for the others.
std::string activeCheckOption(const CheckSpec& spec);

// Runs one check. Its result carries spec.name whatever the check filled in;
// an exception becomes FAIL "check raised: <what>".
CheckResult runCheck(const CheckSpec& spec, const DoctorContext& ctx);
std::vector<CheckResult> runChecks(const std::vector<CheckSpec>& checks, const DoctorContext& ctx);

// 2 any FAIL; 1 any WARN with `strict`; else 0.
int exitCodeFor(const std::vector<CheckResult>& results, bool strict);

}  // namespace dtrain::doctor
