#include "launch/worker_group.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "common/settings.h"
#include "launch/error_file.h"
#include "launch/log_router.h"
#include "common/process.h"

namespace dtrain {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kStopPollInterval{10};
// After a forwarded signal's --shutdown-timeout, SIGTERM gets this long
// (at most) before SIGKILL.
constexpr milliseconds kTermAfterForwardGrace{5000};
// failures(): how long to wait for the last stderr lines of dead workers
// still in their pipes (a grandchild holding a pipe open costs this once).
constexpr milliseconds kTailDrainTimeout{1000};
// stop(): how long to wait for every pipe's EOF once the groups are killed.
constexpr milliseconds kRouterDrainTimeout{1000};

struct Worker {
  int local_rank = 0;
  int global_rank = 0;
  std::string error_file;  // TORCHELASTIC_ERROR_FILE from its environment
  pid_t pid = -1;
  int router_id = -1;
  bool running = false;
  bool exited = false;
  int exit_code = 0;
  int signal = 0;
  bool failed = false;     // exited non-zero or by a signal, seen by poll()
  uint64_t exit_order = 0;
  std::chrono::system_clock::time_point exit_time;
  std::optional<ErrorFileReport> error_report;
};

int globalRank(const std::map<std::string, std::string>& env, int local_rank) {
  auto rank = env.find("RANK");
  if (rank == env.end()) return local_rank;
  return static_cast<int>(parseInt64(rank->second, "RANK of local rank " + std::to_string(local_rank)));
}

}  // namespace

class WorkerGroup::Impl {
 public:
  Impl(WorkerSpec spec_in, std::vector<std::map<std::string, std::string>> envs_in)
      : spec(std::move(spec_in)), envs(std::move(envs_in)) {
    for (size_t i = 0; i < envs.size(); ++i) {
      Worker worker;
      worker.local_rank = static_cast<int>(i);
      worker.global_rank = globalRank(envs[i], worker.local_rank);
      auto error_file = envs[i].find("TORCHELASTIC_ERROR_FILE");
      if (error_file != envs[i].end()) worker.error_file = error_file->second;
      workers.push_back(std::move(worker));
    }
  }

  // A redirected stream goes to its file only; tee puts it back on the console.
  bool toConsole(const Worker& worker, bool is_stderr) const {
    const StreamSet redirect = streamSetFor(spec.redirects, worker.local_rank);
    const StreamSet tee = streamSetFor(spec.tees, worker.local_rank);
    const bool shown = !spec.local_ranks_filter || spec.local_ranks_filter->count(worker.local_rank) > 0;
    return shown && (is_stderr ? !includesStderr(redirect) || includesStderr(tee)
                               : !includesStdout(redirect) || includesStdout(tee));
  }

  WorkerStreams streamsFor(const Worker& worker, const SpawnedProcess& process) const {
    WorkerStreams streams;
    streams.stdout_fd = process.stdout_fd;
    streams.stderr_fd = process.stderr_fd;
    streams.prefix = formatLinePrefix(spec.line_prefix_template, worker.global_rank, worker.local_rank,
                                      spec.role, spec.host);
    streams.stdout_to_console = toConsole(worker, /*is_stderr=*/false);
    streams.stderr_to_console = toConsole(worker, /*is_stderr=*/true);
    if (!spec.log_dir.empty()) {
      const std::string dir = spec.log_dir + "/attempt_" + std::to_string(spec.attempt) + "/" +
                              std::to_string(worker.local_rank);
      streams.stdout_file = dir + "/stdout.log";
      streams.stderr_file = dir + "/stderr.log";
    }
    return streams;
  }

  void recordExit(Worker& worker, int status, bool seen_by_poll) {
    worker.running = false;
    worker.exited = true;
    worker.exit_time = std::chrono::system_clock::now();
    worker.exit_order = next_exit_order++;
    if (WIFEXITED(status)) worker.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) worker.signal = WTERMSIG(status);
    const bool stopped = worker.signal == 0 && worker.exit_code == kExitStoppedAfterCheckpoint;
    if (seen_by_poll && (worker.exit_code != 0 || worker.signal != 0) && !stopped) {
      worker.failed = true;
      // The worker wrote it before it died: it is complete now.
      worker.error_report = readErrorFile(worker.error_file);
      DTRAIN_LOG_DEBUG("worker rank " << worker.global_rank << " (pid " << worker.pid << ") failed: "
                       << (worker.signal != 0 ? signalName(worker.signal) : "exit code " + std::to_string(worker.exit_code)));
    }
  }

  void reapExited(bool seen_by_poll) {
    for (auto& worker : workers) {
      if (!worker.running) continue;
      if (auto status = tryReap(worker.pid)) recordExit(worker, *status, seen_by_poll);
    }
  }

  bool anyRunning() const {
    return std::any_of(workers.begin(), workers.end(), [](const Worker& w) { return w.running; });
  }

  bool anyGroupAlive() const {
    return std::any_of(workers.begin(), workers.end(),
                       [](const Worker& w) { return w.pid > 0 && processGroupAlive(w.pid); });
  }

  WorkerSpec spec;
  std::vector<std::map<std::string, std::string>> envs;
  std::vector<Worker> workers;
  std::unique_ptr<LogRouter> router;
  bool started = false;
  bool stopping = false;
  bool stopped = false;
  uint64_t next_exit_order = 0;
};

WorkerGroup::WorkerGroup(WorkerSpec spec, std::vector<std::map<std::string, std::string>> envs)
    : impl_(std::make_unique<Impl>(std::move(spec), std::move(envs))) {}

WorkerGroup::~WorkerGroup() {
  try {
    stop();
  } catch (const std::exception& e) {
    DTRAIN_LOG_ERROR("stopping the worker group failed: " << e.what());
  }
}

void WorkerGroup::start() {
  Impl& g = *impl_;
  if (g.started) return;
  g.started = true;
  g.router = std::make_unique<LogRouter>();
  // Fork every worker first, then wait for each exec: the children exec in
  // parallel, which is most of a restart's time with 32 workers.
  std::vector<StartedProcess> started;
  started.reserve(g.workers.size());
  size_t awaited = 0;
  // A worker whose stderr reaches this terminal through the router may draw
  // a progress bar there (dtrain train's --progress auto): the router passes
  // its carriage-return updates through.
  const bool terminal = ::isatty(STDERR_FILENO) != 0;
  for (auto& worker : g.workers) {
    auto& env = g.envs[worker.local_rank];
    if (terminal && g.toConsole(worker, /*is_stderr=*/true) && env.count(kProgressTerminalVariable) == 0) {
      env[kProgressTerminalVariable] = "1";
    }
  }
  try {
    for (auto& worker : g.workers) started.push_back(startProcess(g.spec.argv, g.envs[worker.local_rank]));
    for (auto& worker : g.workers) {
      SpawnedProcess process = awaitExec(started[awaited++]);
      worker.pid = process.pid;
      worker.running = true;
      worker.router_id = g.router->addWorker(g.streamsFor(worker, process));
    }
  } catch (...) {
    for (size_t i = awaited; i < started.size(); ++i) abandonProcess(started[i]);
    g.router->start();  // what the started workers said still reaches the console
    stop();
    throw;
  }
  g.router->start();
}

GroupState WorkerGroup::poll() {
  Impl& g = *impl_;
  if (!g.started) return GroupState::kRunning;
  g.reapExited(/*seen_by_poll=*/!g.stopping);
  bool all_done = true, any_stopped = false;
  for (const auto& worker : g.workers) {
    const bool stopped = worker.exited && worker.signal == 0 && worker.exit_code == kExitStoppedAfterCheckpoint;
    if (worker.exited && (worker.exit_code != 0 || worker.signal != 0) && !stopped) return GroupState::kFailed;
    if (!worker.exited) all_done = false;
    any_stopped = any_stopped || stopped;
  }
  if (!all_done) return GroupState::kRunning;
  return any_stopped ? GroupState::kStopped : GroupState::kSucceeded;
}

void WorkerGroup::stop(int first_signal) { stop(first_signal, impl_->spec.shutdown_timeout); }

void WorkerGroup::stop(int first_signal, milliseconds grace) {
  Impl& g = *impl_;
  if (!g.started || g.stopped) return;
  grace = std::min(grace, g.spec.shutdown_timeout);
  g.stopping = true;
  // Sends sig to every group (exited workers' groups too: their children,
  // data loaders or shells' jobs, may outlive them) and waits up to
  // `timeout` for all of them to end; false if some are left.
  const auto signalAndWait = [&g](int sig, milliseconds timeout) {
    for (const auto& worker : g.workers) signalProcessGroup(worker.pid, sig);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      g.reapExited(/*seen_by_poll=*/false);
      // Grandchildren are not ours to reap; they count while not zombies.
      if (!g.anyRunning() && !g.anyGroupAlive()) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(kStopPollInterval);
    }
  };
  bool ended = signalAndWait(first_signal, grace);
  if (!ended && first_signal != SIGTERM) {
    DTRAIN_LOG_WARN("workers still running " << grace.count() << " ms after "
                    << signalName(first_signal) << "; sending SIGTERM");
    ended = signalAndWait(SIGTERM, std::min(grace, kTermAfterForwardGrace));
  }
  // Unconditionally: a group with a member left ignored SIGTERM.
  for (const auto& worker : g.workers) {
    if (signalProcessGroup(worker.pid, SIGKILL)) {
      DTRAIN_LOG_DEBUG("process group " << worker.pid << " (rank " << worker.global_rank
                       << ") outlived SIGTERM by " << grace.count() << " ms; sent SIGKILL");
    }
  }
  for (auto& worker : g.workers) {
    if (worker.running) g.recordExit(worker, reap(worker.pid), /*seen_by_poll=*/false);
  }
  g.router->finish(kRouterDrainTimeout);
  g.stopped = true;
}

void WorkerGroup::forward(int signal) {
  for (const auto& worker : impl_->workers) {
    if (worker.running) signalProcessGroup(worker.pid, signal);
  }
}

std::vector<WorkerFailure> WorkerGroup::failures() const {
  const Impl& g = *impl_;
  std::vector<const Worker*> failed;
  for (const auto& worker : g.workers) {
    if (worker.failed) failed.push_back(&worker);
  }
  std::sort(failed.begin(), failed.end(),
            [](const Worker* a, const Worker* b) { return a->exit_order < b->exit_order; });
  const auto deadline = std::chrono::steady_clock::now() + kTailDrainTimeout;
  std::vector<WorkerFailure> out;
  for (const Worker* worker : failed) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    g.router->waitForEof(worker->router_id, std::max(left, milliseconds(0)));
    WorkerFailure failure;
    failure.local_rank = worker->local_rank;
    failure.global_rank = worker->global_rank;
    failure.pid = worker->pid;
    failure.exit_code = worker->exit_code;
    failure.signal = worker->signal;
    failure.time = worker->exit_time;
    if (worker->error_report) {
      failure.error_file_contents = worker->error_report->contents;
      failure.error_message = worker->error_report->message;
    }
    failure.stderr_tail = g.router->stderrTail(worker->router_id);
    out.push_back(std::move(failure));
  }
  return out;
}

std::vector<std::string> WorkerGroup::stopReasons() const {
  std::vector<std::string> reasons;
  for (const auto& worker : impl_->workers) {
    if (!worker.exited || worker.signal != 0 || worker.exit_code != kExitStoppedAfterCheckpoint) continue;
    const std::optional<ErrorFileReport> report = readErrorFile(worker.error_file);
    if (!report || report->message.empty()) continue;
    if (std::find(reasons.begin(), reasons.end(), report->message) == reasons.end()) reasons.push_back(report->message);
  }
  return reasons;
}

std::vector<pid_t> WorkerGroup::livePids() const {
  std::vector<pid_t> pids;
  for (const auto& worker : impl_->workers) {
    if (worker.running) pids.push_back(worker.pid);
  }
  return pids;
}

std::optional<std::chrono::steady_clock::time_point> WorkerGroup::firstOutputTime() const {
  return impl_->router ? impl_->router->firstOutputTime() : std::nullopt;
}

}  // namespace dtrain
