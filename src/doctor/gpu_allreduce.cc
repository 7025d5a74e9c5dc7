#include "doctor/gpu_allreduce.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <thread>

#include "common/error.h"
#include "metrics/nvml.h"

namespace dtrain::doctor {
namespace {

using Clock = std::chrono::steady_clock;

struct ChildRun {
  bool timed_out = false;
  int wait_status = 0;
  std::string output;  // stdout and stderr together
};

// Reads a file and removes it.
std::string takeFile(const std::string& path) {
  std::string out;
  if (FILE* file = std::fopen(path.c_str(), "rb")) {
    char buffer[8192];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) out.append(buffer, n);
    std::fclose(file);
  }
  ::unlink(path.c_str());
  return out;
}

// Waits for `pid` until `deadline`; true when it exited (status stored).
bool waitUntil(pid_t pid, Clock::time_point deadline, int& status) {
  while (true) {
    pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) return true;
    if (done < 0 && errno != EINTR) return true;  // already reaped or not ours: nothing to wait for
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Runs argv in its own process group with `env` as its environment and its
// output in a temporary file. On timeout the group gets SIGTERM (the launcher
// stops its workers), then SIGKILL after a grace period.
ChildRun runChild(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                  double timeout_seconds, const std::string& temp_dir) {
  std::string path = temp_dir + "/dtrain-doctor-allreduce-XXXXXX";
  int fd = ::mkstemp(path.data());
  if (fd < 0) throw IoError("cannot create a temporary file in " + temp_dir + ": " + errnoString(errno));

  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (const auto& [key, value] : env) env_strings.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fd, 1);
  posix_spawn_file_actions_adddup2(&actions, fd, 2);
  posix_spawn_file_actions_addclose(&actions, fd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, args[0], &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fd);
  if (rc != 0) {
    ::unlink(path.c_str());
    throw ConfigError("cannot run '" + argv[0] + "': " + errnoString(rc));
  }

  ChildRun run;
  auto limit = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  if (!waitUntil(pid, Clock::now() + limit, run.wait_status)) {
    run.timed_out = true;
    ::kill(-pid, SIGTERM);
    if (!waitUntil(pid, Clock::now() + std::chrono::seconds(5), run.wait_status)) {
      ::kill(-pid, SIGKILL);
      while (::waitpid(pid, &run.wait_status, 0) < 0 && errno == EINTR) {
      }
    }
    ::kill(-pid, SIGKILL);  // anything of the group still left
  }
  run.output = takeFile(path);
  return run;
}

std::string lastLines(const std::string& text, size_t count) {
  size_t end = text.size();
  while (end > 0 && text[end - 1] == '\n') --end;
  size_t begin = end;
  for (size_t lines = 0; begin > 0 && lines < count; --begin) {
    if (text[begin - 1] == '\n' && ++lines == count) break;
  }
  return text.substr(begin, end - begin);
}

std::string exitText(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

int visibleGpuCount(const DoctorContext& ctx) {
  int count = static_cast<int>(ctx.nvml->gpus().size());
  auto visible = ctx.getenv("CUDA_VISIBLE_DEVICES");
  if (!visible || visible->empty()) return count;
  int listed = 1;
  for (char c : *visible) listed += c == ',' ? 1 : 0;
  return std::min(count, listed);
}

std::string formatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", value);
  return text;
}

std::string gpuCount(int gpus) { return std::to_string(gpus) + (gpus == 1 ? " GPU" : " GPUs"); }

}  // namespace

CheckResult checkAllreduce(const DoctorContext& ctx) {
  const char* name = "gpu.allreduce";
  if (ctx.nvml == nullptr) return skip(name, "NVML not available");
  const int gpus = ctx.nvml->gpus().empty() ? 0 : visibleGpuCount(ctx);
  if (gpus == 0) return skip(name, "no GPUs");
  std::string binary = ctx.options.dtrain_binary;
  if (binary.empty()) {
    char self[4096];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) binary.assign(self, static_cast<size_t>(n));
  }
  const double timeout = ctx.options.timeout_seconds;
  const std::vector<std::string> argv = {binary, "launch", "--standalone", "--nproc-per-node", std::to_string(gpus),
                                         binary, "bench", "allreduce", "--backend", "nccl", "-b", "256M", "-e",
                                         "256M", "-n", "5", "-w", "2", "--json", "--timeout",
                                         formatNumber(std::max(1.0, timeout))};
  std::string command;
  for (const auto& a : argv) command += (command.empty() ? "" : " ") + a;

  ChildRun run;
  try {
    run = runChild(argv, ctx.env, timeout, ctx.getenv("TMPDIR").value_or("/tmp"));
  } catch (const Error& e) {
    return fail(name, e.message(), "pass the dtrain binary's path; see `dtrain doctor --help`", command);
  }
  const std::string tail = lastLines(run.output, 15);
  if (run.timed_out) {
    return fail(name, "timed out after " + formatNumber(timeout) + " s (" + gpuCount(gpus) + ")",
                "a hang in NCCL init or the first collective: re-run with NCCL_DEBUG=INFO, check gpu.topology and "
                "gpu.fabric; raise --timeout if the GPUs are just slow to initialise",
                command + "\n" + tail);
  }
  if (!WIFEXITED(run.wait_status) || WEXITSTATUS(run.wait_status) != 0) {
    return fail(name, "the all-reduce failed (" + exitText(run.wait_status) + ")",
                "read the output in detail; re-run its command with NCCL_DEBUG=INFO, and check gpu.topology and "
                "gpu.fabric",
                command + "\n" + tail);
  }
  static const std::regex kBusbw(R"re("avg_busbw_gbps"\s*:\s*([0-9.eE+-]+))re");
  std::smatch match;
  std::string last;
  for (auto it = std::sregex_iterator(run.output.begin(), run.output.end(), kBusbw); it != std::sregex_iterator();
       ++it) {
    last = (*it)[1].str();
  }
  char* end = nullptr;
  double busbw = last.empty() ? NAN : std::strtod(last.c_str(), &end);
  if (last.empty() || !std::isfinite(busbw)) {
    return fail(name, "no bus bandwidth in the output of the all-reduce",
                "the bench printed no \"avg_busbw_gbps\": read the output in detail", command + "\n" + tail);
  }
  return pass(name, "busbw " + formatNumber(busbw) + " GB/s over " + gpuCount(gpus) + " (256 MiB)",
              command);
}

}  // namespace dtrain::doctor
