// One forked process per rank (gloo's test/multiproc_test.cc habit), for
// what threads cannot show: real sockets between processes, a TcpStore, and
// a rank killed with SIGKILL.
//
// Each child runs body(child) and _exits with its return value (never
// returning into the test runner). It may child.report() text, which the
// parent reads with readReport(). A child that calls waitForRelease() blocks
// until the parent calls release(), so that ranks stay alive (and keep
// publishing progress) until every report is in.
//
// Children start their body only once every rank is forked: forking while a
// sibling already talks to the store server would fork the server thread in
// the middle of an allocation, and an allocator without fork handlers (ASan's)
// then deadlocks the child.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace dtrain::testing {

// What a child sees of the harness.
struct ForkedChild {
  int rank;
  int report_fd;
  int release_fd;

  void report(const std::string& text) const {
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(report_fd, text.data() + done, text.size() - done);
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }
  void waitForRelease() const {
    char byte;
    while (::read(release_fd, &byte, 1) > 0) {
    }
  }
};

class ForkedRanks {
 public:
  using Body = std::function<int(const ForkedChild& child)>;

  ForkedRanks(int size, const Body& body) : reports_(size, -1), pids_(size, -1) {
    std::vector<int> child_ends(size, -1);
    for (int rank = 0; rank < size; ++rank) {
      int fds[2];
      if (::pipe(fds) != 0) std::perror("pipe");
      reports_[rank] = fds[0];
      child_ends[rank] = fds[1];
    }
    int release[2];
    if (::pipe(release) != 0) std::perror("pipe");
    release_read_ = release[0];
    release_write_ = release[1];
    int start[2];
    if (::pipe(start) != 0) std::perror("pipe");
    for (int rank = 0; rank < size; ++rank) {
      pid_t pid = ::fork();
      if (pid == 0) {
        // Keep only this child's ends, or the parent would never see EOF.
        for (int other = 0; other < size; ++other) {
          ::close(reports_[other]);
          if (other != rank) ::close(child_ends[other]);
        }
        ::close(release_write_);
        ::close(start[1]);
        char byte;
        while (::read(start[0], &byte, 1) > 0) {
        }
        ::close(start[0]);
        const ForkedChild child{rank, child_ends[rank], release_read_};
        int code = 3;
        try {
          code = body(child);
        } catch (const std::exception& e) {
          child.report(std::string("uncaught: ") + e.what());
        }
        ::_exit(code);
      }
      pids_[rank] = pid;
    }
    for (int fd : child_ends) ::close(fd);
    ::close(release_read_);
    release_read_ = -1;
    ::close(start[0]);
    ::close(start[1]);  // every child is forked: let them go
  }

  ~ForkedRanks() {
    release();
    for (size_t rank = 0; rank < pids_.size(); ++rank) {
      if (pids_[rank] > 0) {
        ::kill(pids_[rank], SIGKILL);
        ::waitpid(pids_[rank], nullptr, 0);
      }
      ::close(reports_[rank]);
    }
  }

  pid_t pid(int rank) const { return pids_[rank]; }

  // Reads rank's report until EOF, `max_bytes`, or the deadline.
  std::string readReport(int rank, std::chrono::steady_clock::time_point deadline,
                         size_t max_bytes = 1 << 16) {
    std::string text;
    char chunk[4096];
    while (text.size() < max_bytes) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd fd{reports_[rank], POLLIN, 0};
      if (::poll(&fd, 1, static_cast<int>(left.count())) <= 0) break;
      const ssize_t n = ::read(reports_[rank], chunk, std::min(sizeof(chunk), max_bytes - text.size()));
      if (n <= 0) break;
      text.append(chunk, static_cast<size_t>(n));
    }
    return text;
  }

  // The child's raw wait status (WIFEXITED/WIFSIGNALED apply).
  int reap(int rank) {
    int status = 0;
    ::waitpid(pids_[rank], &status, 0);
    pids_[rank] = -1;
    return status;
  }

  void release() {
    if (release_write_ >= 0) ::close(release_write_);
    release_write_ = -1;
  }

 private:
  std::vector<int> reports_;
  std::vector<pid_t> pids_;
  int release_read_ = -1;
  int release_write_ = -1;
};

}  // namespace dtrain::testing
