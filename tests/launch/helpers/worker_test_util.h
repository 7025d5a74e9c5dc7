// Shared by the launch/ tests: capture this process's console, temp folders,
// worker environments, waiting for real processes.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/process.h"
#include "launch/worker_group.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::testing {

// While alive, fds 1 and 2 of this process go to files; out()/err() put the
// console back and return what was written. Assert only after restore():
// gtest prints its failures to stdout.
class CapturedConsole {
 public:
  CapturedConsole() : dir_(makeTempDir("dtrain-launch-test")) {
    std::fflush(stdout);
    std::fflush(stderr);
    for (int fd : {1, 2}) {
      saved_[fd - 1] = ::dup(fd);
      int file = ::open(path(fd).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(file, fd);
      ::close(file);
    }
  }
  ~CapturedConsole() {
    restore();
    removeTree(dir_);
  }
  void restore() {
    if (saved_[0] < 0) return;
    std::fflush(stdout);
    std::fflush(stderr);
    for (int fd : {1, 2}) {
      ::dup2(saved_[fd - 1], fd);
      ::close(saved_[fd - 1]);
      saved_[fd - 1] = -1;
    }
  }
  std::string out() {
    restore();
    return readFile(path(1));
  }
  std::string err() {
    restore();
    return readFile(path(2));
  }

 private:
  std::string path(int fd) const { return dir_ + (fd == 1 ? "/stdout" : "/stderr"); }
  std::string dir_;
  int saved_[2] = {-1, -1};
};

// The environments of `n` workers: PATH, RANK (rank_offset + i), LOCAL_RANK.
inline std::vector<std::map<std::string, std::string>> workerEnvs(int n, int rank_offset = 0) {
  std::vector<std::map<std::string, std::string>> envs;
  for (int i = 0; i < n; ++i) {
    envs.push_back({{"PATH", "/usr/bin:/bin"},
                    {"RANK", std::to_string(rank_offset + i)},
                    {"LOCAL_RANK", std::to_string(i)}});
  }
  return envs;
}

inline WorkerSpec shellSpec(const std::string& script) {
  WorkerSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.host = "testhost";
  spec.shutdown_timeout = std::chrono::milliseconds(2000);
  return spec;
}

// Polls until the group is no longer running (or `timeout`).
inline GroupState pollUntilDone(WorkerGroup& group, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  GroupState state = group.poll();
  while (state == GroupState::kRunning && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    state = group.poll();
  }
  return state;
}

// True once `pid` is gone or a zombie (an orphan's zombie may stay for good
// where PID 1 does not reap), within `timeout`.
inline bool waitGone(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (processAlive(pid)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Waits until `path` holds a complete first line; returns it ("" on timeout).
inline std::string waitFirstLine(const std::string& path, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::string text = readFile(path);
    size_t newline = text.find('\n');
    if (newline != std::string::npos) return text.substr(0, newline);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return "";
}

}  // namespace dtrain::testing
