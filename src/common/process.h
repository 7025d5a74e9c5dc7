// The OS seam for child processes, for every layer: spawn one, signal its
// process group, reap it, or run one to the end with a deadline. The
// launcher's workers, `dtrain bench train`'s groups and doctor's all-reduce
// reach fork/exec/kill/waitpid only through these functions (tests fake a
// crash with real processes through them too). No torch, no CUDA.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtrain {

// The exit status of a `dtrain train` that stopped on a signal after writing
// a checkpoint (EX_TEMPFAIL: run it again and it goes on). The launcher
// does not count it as a failure, and deploy/slurm/dtrain.sbatch requeues
// the job on it.
inline constexpr int kExitStoppedAfterCheckpoint = 75;


struct SpawnedProcess {
  pid_t pid = -1;
  // Read ends of the child's stdout and stderr pipes: non-blocking,
  // close-on-exec, owned by the caller.
  int stdout_fd = -1;
  int stderr_fd = -1;
};

// Where a child's stdout and stderr go: a pipe to the parent (the default;
// SpawnedProcess holds the read ends), or a descriptor the parent owns (its
// own 1 and 2 to inherit them, or a file), given to the child as it is.
struct ChildOutput {
  int stdout_fd = -1;  // -1: a pipe
  int stderr_fd = -1;
  static ChildOutput inherit() { return {1, 2}; }
};

// Runs argv[0] (searched in the PATH of `env`, as Python's subprocess does
// when given env=, when it has no '/') in a new process group whose id is its
// pid, with exactly `env` as its environment, stdin from /dev/null, every
// other inherited fd closed and every signal at its default disposition,
// unblocked. Returns once the child has exec'd. Throws ConfigError
// "cannot run 'foo': No such file or directory" when the command cannot be
// executed (not found, not executable, exec failed in the child: the child
// reports its errno through a close-on-exec pipe), IoError when the OS
// refuses a pipe or fork.
SpawnedProcess spawnProcess(const std::vector<std::string>& argv,
                            const std::map<std::string, std::string>& env, ChildOutput output = {});

// spawnProcess in two halves, so that a group's workers exec in parallel:
// startProcess forks and returns at once; awaitExec blocks until that child
// has exec'd and throws as spawnProcess does (reaping the child) when it
// could not. Every started process must be awaited or abandoned exactly once.
struct StartedProcess {
  pid_t pid = -1;
  std::string command;  // argv[0], for messages
  int stdout_fd = -1, stderr_fd = -1, exec_status_fd = -1;
};
StartedProcess startProcess(const std::vector<std::string>& argv,
                            const std::map<std::string, std::string>& env, ChildOutput output = {});
SpawnedProcess awaitExec(StartedProcess& started);
// Kills, reaps and closes a started process that will not be awaited.
void abandonProcess(StartedProcess& started);

// The executable `name` resolves to in `path_var` (a PATH value; "" means
// "/bin:/usr/bin"); names with a '/' are returned as given. Throws
// ConfigError like spawnProcess when none is found or none is executable.
std::string resolveExecutable(const std::string& name, const std::string& path_var);

// kill(-pgid, sig); false when the group no longer exists (ESRCH).
bool signalProcessGroup(pid_t pgid, int sig);

// waitpid(pid, WNOHANG): the wait status once the child has exited,
// nullopt while it runs.
std::optional<int> tryReap(pid_t pid);
// Blocking waitpid (retried on EINTR); returns the wait status.
int reap(pid_t pid);

// True while a process with this pid exists and is not a zombie. Orphaned
// grandchildren may stay zombies for good in containers whose PID 1 does not
// reap, so "exists" alone would not mean "still running".
bool processAlive(pid_t pid);
// True while any member of process group `pgid` is alive (not a zombie).
bool processGroupAlive(pid_t pgid);

// This process's environment as a map (the child of runProcess gets it by
// default).
std::map<std::string, std::string> currentEnvironment();

struct RunOptions {
  std::optional<std::map<std::string, std::string>> env;  // nullopt: this process's
  // "": the child writes to this process's stdout and stderr; else both go
  // to this file (created or truncated).
  std::string output_path;
  // After it, the child's process group gets SIGTERM, then SIGKILL once
  // kill_grace has passed. nullopt: wait for as long as it takes.
  std::optional<std::chrono::milliseconds> timeout;
  std::chrono::milliseconds kill_grace{std::chrono::seconds(5)};
};

struct RunResult {
  int wait_status = 0;
  bool timed_out = false;
  // The shell's convention: the exit code, or 128 + the signal.
  int exitCode() const;
};

// Runs argv to the end in its own process group (stdin from /dev/null) and
// returns how it ended; whatever is left of its group afterwards (a
// background grandchild) is killed. Errors as spawnProcess; IoError naming
// output_path when it cannot be created.
RunResult runProcess(const std::vector<std::string>& argv, const RunOptions& options = {});

// "exit code 3", "killed by signal 9 (SIGKILL)".
std::string describeWaitStatus(int status);

}  // namespace dtrain
