// Children forked from the test binary itself (no exec), for what threads
// cannot show: real sockets between processes, a rank killed with SIGKILL,
// a writer killed mid-file (gloo's test/multiproc_test.cc habit; c10d's Fork
// reaps its child the same way).
//
// A child runs body(side) and _exits with its return value, never returning
// into the test runner (an exception: its message on stderr, exit 3). A test
// that must fork before it starts threads (a store server: forking a process
// with threads can copy a held lock) creates the children with
// Start::kLater, starts its server, then hands each child what it needs
// (a port) with start(message).
//
// Every child closes the parent-side ends of every other ForkedChild alive
// at its fork, so a sibling's EOF is never held open by a brother.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::testing {

// What the body sees of the harness.
struct ChildSide {
  int rank = 0;         // the index the parent gave it (ForkedRanks: its rank)
  std::string message;  // what the parent passed to start()
  int report_fd = -1;
  int control_fd = -1;

  // Text the parent reads with ForkedChild::readReport.
  void report(const std::string& text) const;
  // Blocks until the parent calls release() (or dies), so a child stays
  // alive (and keeps serving or publishing) until the parent has what it needs.
  void waitForRelease() const;
};

class ForkedChild {
 public:
  using Body = std::function<int(const ChildSide& side)>;
  enum class Start { kNow, kLater };

  // Forks now. With Start::kLater the child waits for start(); a child whose
  // parent never starts it exits 3 after two minutes rather than linger.
  ForkedChild(const Body& body, Start start = Start::kNow, int rank = 0);
  // Releases it, then SIGKILLs and reaps it unless reaped already.
  ~ForkedChild();
  ForkedChild(const ForkedChild&) = delete;
  ForkedChild& operator=(const ForkedChild&) = delete;

  pid_t pid() const { return pid_; }
  // Lets a Start::kLater child begin, with `message` as side.message.
  void start(const std::string& message = "");
  void release();
  void kill(int signal);
  // Reads the child's reports until EOF, `max_bytes` or the deadline.
  std::string readReport(std::chrono::steady_clock::time_point deadline, size_t max_bytes = 1 << 16);
  // Blocking reap: the raw wait status (the same again once reaped).
  int reap();
  // The raw wait status once it ended within `limit`; nullopt while it runs.
  std::optional<int> reapWithin(std::chrono::milliseconds limit);
  bool reaped() const { return reaped_; }

 private:
  pid_t pid_ = -1;
  int report_fd_ = -1;   // read end
  int control_fd_ = -1;  // write end: the start message, then EOF = release
  bool started_ = false;
  bool reaped_ = false;
  int status_ = 0;
};

// One ForkedChild per rank, all forked before any starts (forking while a
// sibling already talks to a server would fork that server's thread in the
// middle of an allocation; ASan's allocator then deadlocks the child).
class ForkedRanks {
 public:
  // Forks `size` children running body with side.rank = 0..size-1; with
  // Start::kNow they all start once the last is forked.
  ForkedRanks(int size, const ForkedChild::Body& body, ForkedChild::Start start = ForkedChild::Start::kNow);

  int size() const { return static_cast<int>(children_.size()); }
  ForkedChild& operator[](int rank) { return *children_[static_cast<size_t>(rank)]; }
  pid_t pid(int rank) const { return children_[static_cast<size_t>(rank)]->pid(); }
  void startAll(const std::string& message = "");
  void releaseAll();
  // Waits until every child ended or `limit` passed; the ones still running
  // then are SIGKILLed (named on stderr). One raw wait status per rank.
  std::vector<int> waitAll(std::chrono::milliseconds limit);

 private:
  std::vector<std::unique_ptr<ForkedChild>> children_;
};

// WIFEXITED with status 0.
bool exitedCleanly(int wait_status);

}  // namespace dtrain::testing
