// Reads HTTP requests off accepted connections on one epoll thread, so that
// a client slow to send its request holds a file descriptor and a small
// buffer, never a worker thread.
//
// Contract:
// - add(fd) takes ownership of a connected socket (any thread). The intake
//   reads until the request is whole — the head up to its blank line, then
//   a body of a declared Content-Length up to body_max_bytes, or a chunked
//   body up to its last chunk — and then calls the handoff with the fd and
//   every byte read (ownership passes; the call is made on the intake
//   thread and must not block).
// - A request that grows past head_max_bytes without a blank line, or
//   declares a body over body_max_bytes, is handed off as it is, for the
//   HTTP layer to refuse (400, 413, 414) without reading further.
// - A connection whose request is not whole `request_deadline` after add()
//   is answered 408 and closed: the deadline counts from accept to the last
//   byte, however the bytes trickle in (a per-recv() timeout would let one
//   byte a second hold a connection forever).
// - At most `max_connections` are held; to admit one more, the oldest is
//   answered 503 and closed. Served requests take milliseconds, so the
//   oldest is almost always a slow client, and newcomers (scrapes) are
//   admitted even under a flood of thousands.
// - linger(fd) takes back a served connection (any thread): its write side
//   is shut and what the client still sends is read and dropped until it
//   hangs up or `linger` passes, so closing never resets a connection
//   whose response the client has not read yet.
// - stop() closes every connection held; add() or linger() after it closes
//   the fd at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace dtrain::exporter {

struct RequestIntakeOptions {
  std::chrono::milliseconds request_deadline{5000};
  std::chrono::milliseconds linger{2000};
  size_t max_connections = 1024;
  size_t head_max_bytes = 16 * 1024;
  size_t body_max_bytes = 64 * 1024;
};

// Whether `bytes` hold one whole request (see the contract).
enum class RequestState { kIncomplete, kWhole, kOversize };
RequestState requestState(const std::string& bytes, size_t head_max_bytes, size_t body_max_bytes);

class RequestIntake {
 public:
  using Handoff = std::function<void(int fd, std::string bytes)>;
  struct Counters {
    uint64_t handed_off = 0, timed_out = 0, evicted = 0, hung_up = 0;
  };

  RequestIntake(RequestIntakeOptions options, Handoff handoff);
  ~RequestIntake();  // stop()
  RequestIntake(const RequestIntake&) = delete;
  RequestIntake& operator=(const RequestIntake&) = delete;

  void start();  // IoError when epoll or eventfd cannot be had
  void stop();
  void add(int fd);
  void linger(int fd);
  Counters counters() const;
  const RequestIntakeOptions& options() const { return options_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Connection {
    int fd = -1;
    bool lingering = false;
    Clock::time_point deadline;
    std::string bytes;
  };

  void enqueue(int fd, bool lingering);
  void run();
  void admitInbox();
  void admit(int fd, bool lingering);
  void onReadable(uint64_t id);
  void expire();
  void drop(uint64_t id, const char* answer);
  int msUntilNextDeadline() const;

  RequestIntakeOptions options_;
  Handoff handoff_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // written under mutex_, closed under it
  std::thread thread_;

  mutable std::mutex mutex_;
  std::vector<std::pair<int, bool>> inbox_;  // GUARDED_BY(mutex_); (fd, lingering)
  bool running_ = false;                     // GUARDED_BY(mutex_)
  Counters counters_;                        // GUARDED_BY(mutex_)

  // The intake thread's own: ids (not fds, which the kernel reuses) in
  // admission order, which is deadline order within each queue.
  std::unordered_map<uint64_t, Connection> connections_;
  std::deque<uint64_t> reading_order_, lingering_order_;
  uint64_t next_id_ = 1;
};

}  // namespace dtrain::exporter
