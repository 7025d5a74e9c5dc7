#include "tests/support/background_process.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "common/error.h"
#include "common/process.h"
#include "tests/support/text.h"

namespace dtrain::testing {
namespace {

int exitCodeOf(int wait_status) {
  RunResult result;
  result.wait_status = wait_status;
  return result.exitCode();
}

}  // namespace

BackgroundProcess::BackgroundProcess(const std::vector<std::string>& argv,
                                     const std::map<std::string, std::string>& env, const std::string& log_path)
    : log_path_(log_path) {
  std::map<std::string, std::string> merged = currentEnvironment();
  for (const auto& [key, value] : env) merged[key] = value;
  const int log_fd =
      DTRAIN_CHECK_ERRNO(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), "log " + log_path);
  try {
    pid_ = spawnProcess(argv, merged, ChildOutput{log_fd, log_fd}).pid;
  } catch (...) {
    ::close(log_fd);
    throw;
  }
  ::close(log_fd);
}

BackgroundProcess::~BackgroundProcess() { stop(); }

bool BackgroundProcess::running() {
  if (reaped_) return false;
  if (auto status = tryReap(pid_)) {
    reaped_ = true;
    exit_code_ = exitCodeOf(*status);
    return false;
  }
  return true;
}

int BackgroundProcess::waitForExit(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return exit_code_;
}

int BackgroundProcess::stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0 || !running()) return exit_code_;
  signalProcessGroup(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!running()) return exit_code_;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  signalProcessGroup(pid_, SIGKILL);
  reap(pid_);
  reaped_ = true;
  exit_code_ = -1;
  return exit_code_;
}

std::string BackgroundProcess::log() const { return readFile(log_path_); }

}  // namespace dtrain::testing
