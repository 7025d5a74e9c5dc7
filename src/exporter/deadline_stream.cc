#include "exporter/deadline_stream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace dtrain::exporter {
namespace {

using Clock = std::chrono::steady_clock;

void addressOf(const sockaddr_storage& address, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
    port = ntohs(v4.sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text));
    port = ntohs(v6.sin6_port);
  }
  ip = text;
}

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
  ssize_t n;
  do {
    n = ::recv(fd_, ptr, size, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  return n;
}

ssize_t DeadlineStream::write(const char* ptr, size_t size) {
  while (true) {
    ssize_t n = ::send(fd_, ptr, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    int left = msLeft();
    if (left == 0) return -1;
    pollfd p{fd_, POLLOUT, 0};
    if (::poll(&p, 1, left) <= 0) return -1;
  }
}

void DeadlineStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0) addressOf(address, ip, port);
}

void DeadlineStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0) addressOf(address, ip, port);
}

int DeadlineStream::msLeft() const {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(write_deadline_ - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 60 * 60 * 1000));
}

}  // namespace dtrain::exporter
