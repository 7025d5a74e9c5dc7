// Small TCP socket helpers for the store (private to store/ and its tests).
// Every failing call becomes an IoError naming the call and the errno text
// (DTRAIN_CHECK_ERRNO), or names the address it was trying to reach.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace dtrain {

using SteadyTime = std::chrono::steady_clock::time_point;

// Owns one file descriptor; closes it on destruction. Move-only.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() { reset(); }
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// "host:port", with IPv6 literals bracketed: "[::1]:29500".
std::string hostPortText(const std::string& host, uint16_t port);
// The numeric "ip:port" of a socket address, e.g. "10.0.0.7:50112".
std::string socketAddressText(const sockaddr* address, socklen_t length);

// Raises the soft RLIMIT_NOFILE to the hard limit, so one process can hold the
// server's side of 1,024+ client connections (the default soft limit is often
// 1,024). Never fails: a refusal is logged. Returns the soft limit now in effect.
uint64_t raiseOpenFileLimit();

void setNonBlocking(int fd);
void setNoDelay(int fd);

// A non-blocking, SO_REUSEADDR socket listening on bind_address:port
// (IPv4/IPv6 literal or host name; port 0 picks a free port). IoError naming
// the address when no resolved address can be bound.
FileDescriptor listenTcp(const std::string& bind_address, uint16_t port, int backlog);
// The port a bound socket listens on.
uint16_t localPort(int fd);

// One attempt to connect to host:port within `timeout`, trying every address
// the name resolves to. On success `socket` is a connected non-blocking socket;
// otherwise `error` says why (resolver or errno text) so a caller can retry.
struct ConnectAttempt {
  FileDescriptor socket;
  std::string error;
};
ConnectAttempt connectTcpOnce(const std::string& host, uint16_t port,
                              std::chrono::milliseconds timeout);

// poll() on one fd until `events` are ready or `deadline` passes (false).
// POLLERR/POLLHUP count as ready: the following send/recv reports them.
bool pollUntil(int fd, short events, SteadyTime deadline);

// Sends all of `bytes` on a non-blocking socket; false when the deadline
// passes first. IoError (naming send) when the connection fails.
bool sendAll(int fd, std::string_view bytes, SteadyTime deadline);

}  // namespace dtrain
