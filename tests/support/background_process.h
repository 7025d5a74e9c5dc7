// A program started in the background for a test (an exporter, a Prometheus
// server, a peer), its stdout and stderr in a log file, stopped with SIGTERM
// and then SIGKILL if it outlives the grace period. The destructor stops it.
// Built on common/process.h.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace dtrain::testing {

class BackgroundProcess {
 public:
  // Runs argv (argv[0] a path or a name on PATH) with this process's
  // environment plus `env` (which wins); stdout and stderr go to log_path.
  BackgroundProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                    const std::string& log_path);
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running();
  // Waits up to `limit` for it to exit by itself: its exit code (128 +
  // signal), or -1 when it still runs (it is left running).
  int waitForExit(std::chrono::milliseconds limit);
  // The exit code, or 128 + signal; -1 if it had to be killed after `grace`.
  int stop(std::chrono::milliseconds grace = std::chrono::seconds(10));
  std::string log() const;

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
  bool reaped_ = false;
  std::string log_path_;
};

}  // namespace dtrain::testing
