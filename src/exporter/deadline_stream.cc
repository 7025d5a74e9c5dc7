#include "exporter/deadline_stream.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/socket.h"

namespace dtrain::exporter {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

DeadlineStream::DeadlineStream(int fd, std::string received, Clock::time_point write_deadline)
    : fd_(fd), received_(std::move(received)), write_deadline_(write_deadline) {}

bool DeadlineStream::is_readable() const {
  if (consumed_ < received_.size()) return true;
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

bool DeadlineStream::is_writable() const {
  pollfd p{fd_, POLLOUT, 0};
  return ::poll(&p, 1, msLeft()) > 0 && (p.revents & POLLOUT);
}

ssize_t DeadlineStream::read(char* ptr, size_t size) {
  if (consumed_ < received_.size()) {
    size_t n = std::min(size, received_.size() - consumed_);
    std::memcpy(ptr, received_.data() + consumed_, n);
    consumed_ += n;
    return static_cast<ssize_t>(n);
  }
  return receiveSome(fd_, ptr, size);
}

ssize_t DeadlineStream::write(const char* ptr, size_t size) {
  while (true) {
    ssize_t n = sendSome(fd_, ptr, size);
    if (n >= 0) return n;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    int left = msLeft();
    if (left == 0) return -1;
    pollfd p{fd_, POLLOUT, 0};
    if (::poll(&p, 1, left) <= 0) return -1;
  }
}

void DeadlineStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  if (auto endpoint = peerEndpoint(fd_)) {
    ip = endpoint->ip;
    port = endpoint->port;
  }
}

void DeadlineStream::get_local_ip_and_port(std::string& ip, int& port) const {
  if (auto endpoint = localEndpoint(fd_)) {
    ip = endpoint->ip;
    port = endpoint->port;
  }
}

int DeadlineStream::msLeft() const {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(write_deadline_ - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 60 * 60 * 1000));
}

}  // namespace dtrain::exporter
