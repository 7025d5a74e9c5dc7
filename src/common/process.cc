#include "common/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <thread>
#include <utility>

#include "common/error.h"
#include "common/file_descriptor.h"

namespace dtrain {
namespace {

// What a child that could not exec writes to the error pipe before _exit.
struct ChildError {
  int stage;
  int err;
};
enum ChildStage { kSetpgid = 1, kStdio = 2, kExec = 3 };

std::string errorText(int err) { return std::generic_category().message(err); }

// Keeps our own descriptors above stdio, so the child's dup2 onto 0..2 never
// overwrites one it still has to dup (a launcher started with stdio closed).
int aboveStdio(int fd) {
  if (fd > 2) return fd;
  int moved = DTRAIN_CHECK_ERRNO(::fcntl(fd, F_DUPFD_CLOEXEC, 3));
  ::close(fd);
  return moved;
}

void makePipe(FileDescriptor& read_end, FileDescriptor& write_end) {
  int fds[2];
  DTRAIN_CHECK_ERRNO(::pipe2(fds, O_CLOEXEC));
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
  read_end.reset(aboveStdio(read_end.release()));
  write_end.reset(aboveStdio(write_end.release()));
}

std::vector<char*> cStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

void closeRange(unsigned first, unsigned last, int fallback_max) {
  if (first > last) return;
  if (::syscall(SYS_close_range, first, last, 0) == 0) return;
  // Kernels before 5.9: close one by one (close is async-signal-safe).
  for (long fd = first; fd <= static_cast<long>(last) && fd < fallback_max; ++fd) ::close(static_cast<int>(fd));
}

// Runs in the forked child: only async-signal-safe calls from here on.
[[noreturn]] void execChild(const char* path, char* const* argv, char* const* envp, int stdin_fd,
                            int stdout_fd, int stderr_fd, int error_fd, int fallback_max_fd) {
  ChildError failure{0, 0};
  if (::setpgid(0, 0) != 0) {
    failure = {kSetpgid, errno};
  } else {
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (::dup2(stdin_fd, 0) < 0 || ::dup2(stdout_fd, 1) < 0 || ::dup2(stderr_fd, 2) < 0) {
      failure = {kStdio, errno};
    } else {
      // error_fd is close-on-exec: it stays open until execve succeeds.
      closeRange(3, static_cast<unsigned>(error_fd) - 1, fallback_max_fd);
      closeRange(static_cast<unsigned>(error_fd) + 1, UINT_MAX, fallback_max_fd);
      ::execve(path, argv, envp);
      failure = {kExec, errno};
    }
  }
  ssize_t ignored = ::write(error_fd, &failure, sizeof(failure));
  (void)ignored;
  ::_exit(127);
}

// "S", "Z", ... from /proc/<pid>/stat, with the process group; false when
// the process is gone or /proc cannot tell.
bool readProcStat(pid_t pid, char* state, pid_t* pgrp) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[512];
  ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
  const char* close_paren = std::strrchr(buf, ')');
  if (close_paren == nullptr) return false;
  long ppid = 0, group = 0;
  if (std::sscanf(close_paren + 1, " %c %ld %ld", state, &ppid, &group) != 3) return false;
  *pgrp = static_cast<pid_t>(group);
  return true;
}

bool isDead(char state) { return state == 'Z' || state == 'X' || state == 'x'; }

}  // namespace

std::string resolveExecutable(const std::string& name, const std::string& path_var) {
  if (name.empty()) throw ConfigError("cannot run '': the worker command is empty");
  if (name.find('/') != std::string::npos) return name;
  const std::string path = path_var.empty() ? "/bin:/usr/bin" : path_var;
  int err = ENOENT;
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(begin, end - begin);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      err = EACCES;
    }
    begin = end + 1;
  }
  throw ConfigError("cannot run '" + name + "': " + errorText(err));
}

StartedProcess startProcess(const std::vector<std::string>& argv,
                            const std::map<std::string, std::string>& env, ChildOutput output) {
  if (argv.empty()) throw ConfigError("cannot run '': the worker command is empty");
  auto path_entry = env.find("PATH");
  std::string path = resolveExecutable(argv[0], path_entry == env.end() ? "" : path_entry->second);

  // Everything the child needs is built before fork: after it, the child of
  // a multi-threaded parent may not allocate.
  std::vector<std::string> args = argv;
  std::vector<std::string> vars;
  for (const auto& [key, value] : env) vars.push_back(key + "=" + value);
  std::vector<char*> c_args = cStrings(args);
  std::vector<char*> c_vars = cStrings(vars);
  long open_max = ::sysconf(_SC_OPEN_MAX);
  int fallback_max_fd = (open_max <= 0 || open_max > 65536) ? 65536 : static_cast<int>(open_max);

  FileDescriptor dev_null(aboveStdio(DTRAIN_CHECK_ERRNO(::open("/dev/null", O_RDONLY | O_CLOEXEC))));
  FileDescriptor out_read, out_write, err_read, err_write, error_read, error_write;
  if (output.stdout_fd < 0) makePipe(out_read, out_write);
  if (output.stderr_fd < 0) makePipe(err_read, err_write);
  makePipe(error_read, error_write);
  const int child_out = output.stdout_fd < 0 ? out_write.get() : output.stdout_fd;
  const int child_err = output.stderr_fd < 0 ? err_write.get() : output.stderr_fd;

  std::fflush(nullptr);  // what this process buffered must not be written twice
  pid_t pid = DTRAIN_CHECK_ERRNO(::fork());
  if (pid == 0) {
    execChild(path.c_str(), c_args.data(), c_vars.data(), dev_null.get(), child_out, child_err,
              error_write.get(), fallback_max_fd);
  }
  // Also from the parent, so the group exists before anyone signals it
  // (EACCES once the child has exec'd, ESRCH if it is gone: both fine).
  ::setpgid(pid, pid);
  StartedProcess started;
  started.pid = pid;
  started.command = argv[0];
  started.stdout_fd = out_read.release();
  started.stderr_fd = err_read.release();
  started.exec_status_fd = error_read.release();
  return started;
}

void abandonProcess(StartedProcess& started) {
  if (started.pid <= 0) return;
  signalProcessGroup(started.pid, SIGKILL);
  reap(started.pid);
  for (int* fd : {&started.stdout_fd, &started.stderr_fd, &started.exec_status_fd}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  started.pid = -1;
}

SpawnedProcess awaitExec(StartedProcess& started) {
  FileDescriptor error_read(started.exec_status_fd);
  FileDescriptor out_read(started.stdout_fd);
  FileDescriptor err_read(started.stderr_fd);
  started.exec_status_fd = started.stdout_fd = started.stderr_fd = -1;
  const pid_t pid = started.pid;
  started.pid = -1;

  ChildError failure{0, 0};
  ssize_t n;
  do {
    n = ::read(error_read.get(), &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(failure))) {
    reap(pid);
    if (failure.stage == kExec) throw ConfigError("cannot run '" + started.command + "': " + errorText(failure.err));
    throw errnoError(failure.stage == kSetpgid ? "setpgid" : "dup2", failure.err,
                     "cannot start '" + started.command + "' (in the child)");
  }
  try {
    DTRAIN_CHECK_ERRNO(n);
    for (int fd : {out_read.get(), err_read.get()}) {
      if (fd < 0) continue;  // the child writes where the caller said
      int flags = DTRAIN_CHECK_ERRNO(::fcntl(fd, F_GETFL));
      DTRAIN_CHECK_ERRNO(::fcntl(fd, F_SETFL, flags | O_NONBLOCK));
    }
  } catch (...) {
    signalProcessGroup(pid, SIGKILL);
    reap(pid);
    throw;
  }
  SpawnedProcess spawned;
  spawned.pid = pid;
  spawned.stdout_fd = out_read.release();
  spawned.stderr_fd = err_read.release();
  return spawned;
}

SpawnedProcess spawnProcess(const std::vector<std::string>& argv,
                            const std::map<std::string, std::string>& env, ChildOutput output) {
  StartedProcess started = startProcess(argv, env, output);
  return awaitExec(started);
}

bool signalProcessGroup(pid_t pgid, int sig) {
  if (pgid <= 1) return false;  // never kill(-1) or kill(0): that would hit us
  if (::kill(-pgid, sig) == 0) return true;
  int err = errno;
  // EPERM: only someone else's processes are left in the group.
  if (err == ESRCH || err == EPERM) return false;
  throw errnoError("kill", err, "signal " + std::to_string(sig) + " to process group " + std::to_string(pgid));
}

std::optional<int> tryReap(pid_t pid) {
  int status = 0;
  pid_t rc;
  do {
    rc = ::waitpid(pid, &status, WNOHANG);
  } while (rc < 0 && errno == EINTR);
  DTRAIN_CHECK_ERRNO(rc);
  if (rc == 0) return std::nullopt;
  return status;
}

int reap(pid_t pid) {
  int status = 0;
  pid_t rc;
  do {
    rc = ::waitpid(pid, &status, 0);
  } while (rc < 0 && errno == EINTR);
  DTRAIN_CHECK_ERRNO(rc);
  return status;
}

bool processAlive(pid_t pid) {
  char state = 0;
  pid_t group = 0;
  if (readProcStat(pid, &state, &group)) return !isDead(state);
  return ::kill(pid, 0) == 0;
}

bool processGroupAlive(pid_t pgid) {
  if (pgid <= 1 || (::kill(-pgid, 0) != 0 && errno == ESRCH)) return false;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return true;  // the group exists; /proc cannot say more
  bool alive = false;
  while (struct dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    char state = 0;
    pid_t group = 0;
    if (readProcStat(static_cast<pid_t>(pid), &state, &group) && group == pgid && !isDead(state)) {
      alive = true;
      break;
    }
  }
  ::closedir(proc);
  return alive;
}

std::map<std::string, std::string> currentEnvironment() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const size_t eq = text.find('=');
    if (eq != std::string::npos) env.emplace(text.substr(0, eq), text.substr(eq + 1));
  }
  return env;
}

int RunResult::exitCode() const {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

std::string describeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return "killed by signal " + std::to_string(sig) + (name != nullptr ? std::string(" (SIG") + name + ")" : "");
  }
  return "wait status " + std::to_string(status);
}

namespace {

// Polls for the child's end until `deadline`; its wait status, or nullopt.
std::optional<int> reapBy(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  while (true) {
    if (auto status = tryReap(pid)) return status;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

RunResult runProcess(const std::vector<std::string>& argv, const RunOptions& options) {
  FileDescriptor file;
  ChildOutput output = ChildOutput::inherit();
  if (!options.output_path.empty()) {
    file.reset(aboveStdio(DTRAIN_CHECK_ERRNO(
        ::open(options.output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644),
        "cannot create the output file of '" + (argv.empty() ? std::string() : argv[0]) + "'")));
    output = {file.get(), file.get()};
  }
  StartedProcess started = startProcess(argv, options.env ? *options.env : currentEnvironment(), output);
  const SpawnedProcess child = awaitExec(started);
  file.reset();
  RunResult result;
  if (!options.timeout) {
    result.wait_status = reap(child.pid);
  } else if (auto status = reapBy(child.pid, std::chrono::steady_clock::now() + *options.timeout)) {
    result.wait_status = *status;
  } else {
    result.timed_out = true;
    signalProcessGroup(child.pid, SIGTERM);
    auto ended = reapBy(child.pid, std::chrono::steady_clock::now() + options.kill_grace);
    if (!ended) {
      signalProcessGroup(child.pid, SIGKILL);
      ended = reap(child.pid);
    }
    result.wait_status = *ended;
  }
  signalProcessGroup(child.pid, SIGKILL);  // anything of the group still left
  return result;
}

}  // namespace dtrain
