// The workers of one node for one attempt (launch/): spawning, log routing,
// monitoring, gang stop. No torch, no CUDA.
//
// Contract:
// - start() spawns local_world_size processes, each in its own process group
//   (setpgid), with the environment given for its local rank, stdin from
//   /dev/null, stdout and stderr through pipes to the LogRouter.
// - poll() never blocks: it reaps exited workers and returns the group state:
//   kRunning while any worker runs and none failed; kFailed as soon as one
//   exits non-zero (but kExitStoppedAfterCheckpoint) or by a signal;
//   kSucceeded when all exited 0; kStopped when all exited 0 or
//   kExitStoppedAfterCheckpoint, at least one the latter (they stopped on a
//   signal and saved their work).
// - stop(sig) sends sig (SIGTERM by default) to every worker's process
//   group and gives them shutdown_timeout to exit; a signal other than
//   SIGTERM (a forwarded SIGINT or SIGUSR1, which a trainer answers by
//   checkpointing) is followed by SIGTERM and at most 5 s more; then
//   SIGKILL. It returns when all are reaped (no orphans, no zombies);
//   stopping a stopped group is a no-op. A `grace` shorter than
//   shutdown_timeout replaces it (workers that cannot finish anything
//   anyway: a peer of theirs is gone).
// - forward(sig) sends sig to every live worker's process group.
// - failures() lists every failed worker, first in time first, with its exit
//   code or signal, its error file contents (TORCHELASTIC_ERROR_FILE, if the
//   worker wrote it) and the last 20 lines of its stderr. Only failures seen
//   by poll() count: workers that stop() terminates are not failures.
// - Logs (see log_router.h): lines prefixed by line_prefix_template on the
//   console; with a log_dir, raw copies in <log_dir>/attempt_<n>/<local_rank>/
//   {stdout,stderr}.log. redirects[r] keeps a stream off the console, tees[r]
//   puts it back; key -1 (kAllLocalRanks) stands for every local rank without
//   an entry of its own. local_ranks_filter limits the console, not the files.
// - One owner thread calls every method; forward() is not signal-safe.
#pragma once

#include <sys/types.h>

#include <csignal>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launch/launch_config.h"

namespace dtrain {

struct WorkerSpec {
  std::vector<std::string> argv;
  std::string role = "default";
  std::string host;          // for line prefixes and reports
  std::string log_dir;       // <log_dir>/attempt_<n>/<local_rank>/{stdout,stderr}.log
  int attempt = 0;
  std::map<int, StreamSet> redirects;
  std::map<int, StreamSet> tees;
  std::optional<std::set<int>> local_ranks_filter;
  std::string line_prefix_template;
  std::chrono::milliseconds shutdown_timeout{std::chrono::seconds(30)};
};

struct WorkerFailure {
  int local_rank = 0;
  int global_rank = 0;
  pid_t pid = 0;
  int exit_code = 0;    // when exited normally
  int signal = 0;       // when killed by a signal (0 otherwise)
  std::chrono::system_clock::time_point time;
  std::string error_file_contents;         // "" when the worker wrote none
  std::string error_message;               // its message.message; "" when none
  std::vector<std::string> stderr_tail;    // last 20 lines
};

enum class GroupState { kRunning, kSucceeded, kFailed, kStopped };

class WorkerGroup {
 public:
  // envs[i] is the complete environment of local rank i (global rank =
  // the value of its RANK entry).
  WorkerGroup(WorkerSpec spec, std::vector<std::map<std::string, std::string>> envs);
  ~WorkerGroup();  // stop()s
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Throws ConfigError naming the command when it cannot be executed
  // (not found / not executable), after stopping anything already started.
  void start();
  GroupState poll();
  void stop(int first_signal = SIGTERM);
  void stop(int first_signal, std::chrono::milliseconds grace);
  void forward(int signal);
  std::vector<WorkerFailure> failures() const;
  // Why the workers that exited kExitStoppedAfterCheckpoint stopped: the
  // messages of their error files, each once, in local-rank order (a
  // worker stopped by a signal writes none; `dtrain train --on-straggler
  // stop` names the straggler there).
  std::vector<std::string> stopReasons() const;
  std::vector<pid_t> livePids() const;
  // Time the first line of output of any worker arrived (for benchmarks).
  std::optional<std::chrono::steady_clock::time_point> firstOutputTime() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// The root-cause summary: human text for stderr and JSON for
// <log_dir>/failure.json. `failures` in time order; the first is the root
// cause. SIGKILL is described as "SIGKILL (possibly killed by the OOM killer)".
std::string formatFailureSummary(const std::vector<WorkerFailure>& failures, const std::string& host,
                                 int attempt);
std::string failureSummaryJson(const std::vector<WorkerFailure>& failures, const std::string& host,
                               int attempt);
// When the root cause died of a Python module it could not import
// ("ModuleNotFoundError: No module named 'torch'" in its stderr or error
// file), lines that name the interpreter that ran it (`python_path`, from
// `python_origin`: "PYTHON_EXEC" or "python3 on PATH") and how to choose
// another; "" otherwise, or when no python ran (python_path "").
std::string missingModuleHint(const WorkerFailure& root_cause, const std::string& python_path,
                              const std::string& python_origin);
// "SIGKILL", "SIGSEGV", ... ; "signal 42" for unnamed ones.
std::string signalName(int signal);
// The exit code the launcher returns for a root cause: its exit code, or
// 128 + signal.
int launcherExitCode(const WorkerFailure& root_cause);

}  // namespace dtrain
