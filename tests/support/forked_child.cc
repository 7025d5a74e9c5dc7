#include "tests/support/forked_child.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "common/process.h"

namespace dtrain::testing {
namespace {

constexpr int kNeverStartedMs = 120'000;

// Parent-side pipe ends of every live ForkedChild, closed in each new child.
std::mutex& openEndsMutex() {
  static std::mutex mutex;
  return mutex;
}
std::vector<int>& openEnds() {
  static std::vector<int> ends;
  return ends;
}
void trackEnd(int fd) {
  std::lock_guard<std::mutex> lock(openEndsMutex());
  openEnds().push_back(fd);
}
void closeEnd(int& fd) {
  if (fd < 0) return;
  {
    std::lock_guard<std::mutex> lock(openEndsMutex());
    auto& ends = openEnds();
    ends.erase(std::remove(ends.begin(), ends.end(), fd), ends.end());
  }
  ::close(fd);
  fd = -1;
}

bool readExactly(int fd, void* data, size_t size, int timeout_ms) {
  char* bytes = static_cast<char*>(data);
  while (size > 0) {
    pollfd ready{fd, POLLIN, 0};
    if (::poll(&ready, 1, timeout_ms) != 1) return false;
    const ssize_t got = ::read(fd, bytes, size);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    bytes += got;
    size -= static_cast<size_t>(got);
  }
  return true;
}

void writeAll(int fd, const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t put = ::write(fd, bytes, size);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return;  // the child is gone; its wait status says why
    bytes += put;
    size -= static_cast<size_t>(put);
  }
}

[[noreturn]] void exitChild(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  // _exit: the child must not run the parent's atexit handlers or gtest's.
  ::_exit(code);
}

// The child's whole life: wait for the start message, run the body, exit.
[[noreturn]] void runChild(const ForkedChild::Body& body, ChildSide side, bool wait_for_start) {
  if (wait_for_start) {
    uint32_t length = 0;
    if (!readExactly(side.control_fd, &length, sizeof(length), kNeverStartedMs)) exitChild(3);
    side.message.resize(length);
    if (length > 0 && !readExactly(side.control_fd, side.message.data(), length, kNeverStartedMs)) exitChild(3);
  }
  int code = 3;
  try {
    code = body(side);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "forked child %d (rank %d): %s\n", ::getpid(), side.rank, e.what());
  } catch (...) {
    std::fprintf(stderr, "forked child %d (rank %d): unknown exception\n", ::getpid(), side.rank);
  }
  exitChild(code);
}

}  // namespace

void ChildSide::report(const std::string& text) const { writeAll(report_fd, text.data(), text.size()); }

void ChildSide::waitForRelease() const {
  char byte;
  while (::read(control_fd, &byte, 1) > 0) {
  }
}

ForkedChild::ForkedChild(const Body& body, Start start, int rank) {
  int report[2], control[2];
  DTRAIN_CHECK_ERRNO(::pipe(report), "forking a test child");
  DTRAIN_CHECK_ERRNO(::pipe(control), "forking a test child");
  const pid_t pid = ::fork();
  if (pid < 0) throw errnoError("fork", errno, "forking a test child");
  if (pid == 0) {
    for (int fd : openEnds()) ::close(fd);
    ::close(report[0]);
    ::close(control[1]);
    runChild(body, ChildSide{rank, "", report[1], control[0]}, start == Start::kLater);
  }
  pid_ = pid;
  ::close(report[1]);
  ::close(control[0]);
  report_fd_ = report[0];
  control_fd_ = control[1];
  trackEnd(report_fd_);
  trackEnd(control_fd_);
  if (start == Start::kNow) started_ = true;
}

ForkedChild::~ForkedChild() {
  release();
  if (!reaped_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  closeEnd(report_fd_);
}

void ForkedChild::start(const std::string& message) {
  if (started_ || control_fd_ < 0) return;
  started_ = true;
  const auto length = static_cast<uint32_t>(message.size());
  writeAll(control_fd_, &length, sizeof(length));
  writeAll(control_fd_, message.data(), message.size());
}

void ForkedChild::release() { closeEnd(control_fd_); }

void ForkedChild::kill(int signal) {
  if (!reaped_) ::kill(pid_, signal);
}

std::string ForkedChild::readReport(std::chrono::steady_clock::time_point deadline, size_t max_bytes) {
  std::string text;
  char chunk[4096];
  while (text.size() < max_bytes) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) break;
    pollfd ready{report_fd_, POLLIN, 0};
    if (::poll(&ready, 1, static_cast<int>(left)) <= 0) break;
    const ssize_t n = ::read(report_fd_, chunk, std::min(sizeof(chunk), max_bytes - text.size()));
    if (n <= 0) break;
    text.append(chunk, static_cast<size_t>(n));
  }
  return text;
}

int ForkedChild::reap() {
  if (!reaped_) {
    status_ = dtrain::reap(pid_);
    reaped_ = true;
  }
  return status_;
}

std::optional<int> ForkedChild::reapWithin(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!reaped_) {
    if (auto status = tryReap(pid_)) {
      status_ = *status;
      reaped_ = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return status_;
}

ForkedRanks::ForkedRanks(int size, const ForkedChild::Body& body, ForkedChild::Start start) {
  for (int rank = 0; rank < size; ++rank) {
    children_.push_back(std::make_unique<ForkedChild>(body, ForkedChild::Start::kLater, rank));
  }
  if (start == ForkedChild::Start::kNow) startAll();
}

void ForkedRanks::startAll(const std::string& message) {
  for (auto& child : children_) child->start(message);
}

void ForkedRanks::releaseAll() {
  for (auto& child : children_) child->release();
}

std::vector<int> ForkedRanks::waitAll(std::chrono::milliseconds limit) {
  std::vector<int> statuses(children_.size(), 0);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (size_t rank = 0; rank < children_.size(); ++rank) {
    ForkedChild& child = *children_[rank];
    const auto left = std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                 deadline - std::chrono::steady_clock::now()));
    if (auto status = child.reapWithin(left)) {
      statuses[rank] = *status;
      continue;
    }
    std::fprintf(stderr, "rank %zu still running after %lld ms; killing it\n", rank,
                 static_cast<long long>(limit.count()));
    child.kill(SIGKILL);
    statuses[rank] = child.reap();
  }
  return statuses;
}

bool exitedCleanly(int wait_status) { return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0; }

}  // namespace dtrain::testing
