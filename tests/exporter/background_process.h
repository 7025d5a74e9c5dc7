// A process started in the background for a test (an exporter, a Prometheus
// server), its stdout and stderr in a log file, stopped by its PID: SIGTERM,
// then SIGKILL if it outlives the grace period. The destructor stops it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace dtrain::testing {

class BackgroundProcess {
 public:
  // argv[0] is a path; `env` is added to (or overrides) this process's.
  BackgroundProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                    const std::string& log_path);
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running();
  // The exit code, or 128 + signal; -1 if it had to be killed after `grace`.
  int stop(std::chrono::milliseconds grace = std::chrono::seconds(10));
  std::string log() const;

 private:
  pid_t pid_ = -1;
  int status_ = -1;
  bool reaped_ = false;
  std::string log_path_;
};

// A fresh directory under /tmp; tests remove it when they pass.
std::string makeTempDir(const std::string& prefix);

}  // namespace dtrain::testing
