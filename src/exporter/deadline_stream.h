// The httplib::Stream a worker serves one request over: a connected,
// non-blocking socket whose request RequestIntake already read.
//
// Contract:
// - read() yields the bytes the intake read, then only bytes that have
//   already arrived: a request the intake judged whole needs no more, and
//   one it cut at a size cap gets its 400/413/414 without a worker waiting
//   on the client.
// - write() sends the response within one deadline for the whole response
//   (a per-send() timeout would let a client that reads a byte a second
//   hold the worker indefinitely); past it, write() fails and httplib stops.
// - The stream does not own the socket.
#pragma once

#include <httplib.h>

#include <chrono>
#include <string>

namespace dtrain::exporter {

class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(int fd, std::string received, std::chrono::steady_clock::time_point write_deadline);

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return fd_; }

 private:
  // Milliseconds until the write deadline, 0 when past it.
  int msLeft() const;

  int fd_;
  std::string received_;
  size_t consumed_ = 0;
  std::chrono::steady_clock::time_point write_deadline_;
};

}  // namespace dtrain::exporter
