#include "common/socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <memory>

#include "common/addrinfo.h"
#include "common/error.h"
#include "common/log.h"

namespace dtrain {
namespace {

// getaddrinfo for a stream socket; on failure returns null and sets `error`.
AddrInfoList resolve(const std::string& host, uint16_t port, int flags, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags | AI_NUMERICSERV;
  addrinfo* result = nullptr;
  std::string service = std::to_string(port);
  // "[::1]" is how an IPv6 literal arrives from a "host:port" string.
  std::string name = host;
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') name = name.substr(1, name.size() - 2);
  int rc = getaddrinfo(name.empty() ? nullptr : name.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) {
    *error = "cannot resolve '" + host + "': " +
             (rc == EAI_SYSTEM ? errnoString(errno) : std::string(gai_strerror(rc)));
    return nullptr;
  }
  return AddrInfoList(result);
}

int remainingMillis(SteadyTime deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, INT_MAX));
}

}  // namespace

std::string hostPortText(const std::string& host, uint16_t port) {
  bool ipv6_literal = host.find(':') != std::string::npos && host.front() != '[';
  return (ipv6_literal ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string socketAddressText(const sockaddr* address, socklen_t length) {
  char host[NI_MAXHOST];
  char service[NI_MAXSERV];
  if (getnameinfo(address, length, host, sizeof(host), service, sizeof(service),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "unknown-peer";
  }
  return hostPortText(host, static_cast<uint16_t>(std::atoi(service)));
}

uint64_t raiseOpenFileLimit() {
  rlimit limit{};
  DTRAIN_CHECK_ERRNO(getrlimit(RLIMIT_NOFILE, &limit));
  if (limit.rlim_cur < limit.rlim_max) {
    rlim_t wanted = limit.rlim_max;
    limit.rlim_cur = wanted;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      DTRAIN_LOG_WARN("could not raise the open-file limit to " << wanted << ": "
                      << errnoString(errno) << "; the store may refuse clients beyond it");
      getrlimit(RLIMIT_NOFILE, &limit);
    }
  }
  return static_cast<uint64_t>(limit.rlim_cur);
}

void setNonBlocking(int fd) {
  int flags = DTRAIN_CHECK_ERRNO(fcntl(fd, F_GETFL));
  DTRAIN_CHECK_ERRNO(fcntl(fd, F_SETFL, flags | O_NONBLOCK));
}

void setNoDelay(int fd) {
  // Store requests are small and latency-bound; Nagle would hold them back.
  int one = 1;
  DTRAIN_CHECK_ERRNO(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
}

void setPeerSilenceLimit(int fd, std::chrono::milliseconds silence) {
  const int seconds = static_cast<int>(std::max<int64_t>(silence.count() / 1000, 3));
  const int idle = std::max(1, seconds / 3);
  const int interval = std::max(1, (seconds - idle) / 3);
  const int probes = 3;
  const unsigned int user_timeout_ms = static_cast<unsigned int>(std::max<int64_t>(silence.count(), 1000));
  int one = 1;
  DTRAIN_CHECK_ERRNO(setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)));
  DTRAIN_CHECK_ERRNO(setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)));
  DTRAIN_CHECK_ERRNO(setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval)));
  DTRAIN_CHECK_ERRNO(setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes)));
  DTRAIN_CHECK_ERRNO(setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms)));
}

FileDescriptor listenTcp(const std::string& bind_address, uint16_t port, int backlog) {
  const std::string where = hostPortText(bind_address, port);
  std::string error;
  AddrInfoList addresses = resolve(bind_address, port, AI_PASSIVE, &error);
  if (!addresses) throw IoError("could not listen on " + where + ": " + error);
  for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    FileDescriptor fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                               a->ai_protocol));
    if (!fd.valid()) {
      error = "socket() failed: " + errnoString(errno);
      continue;
    }
    int one = 1;
    DTRAIN_CHECK_ERRNO(setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      error = "bind() failed: " + errnoString(errno);
      continue;
    }
    if (::listen(fd.get(), backlog) != 0) {
      error = "listen() failed: " + errnoString(errno);
      continue;
    }
    return fd;
  }
  throw IoError("could not listen on " + where + ": " + error);
}

uint16_t localPort(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  DTRAIN_CHECK_ERRNO(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length));
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
}

ConnectAttempt connectTcpOnce(const std::string& host, uint16_t port,
                              std::chrono::milliseconds timeout) {
  ConnectAttempt attempt;
  AddrInfoList addresses = resolve(host, port, 0, &attempt.error);
  if (!addresses) return attempt;
  SteadyTime deadline = std::chrono::steady_clock::now() + timeout;
  for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    FileDescriptor fd(DTRAIN_CHECK_ERRNO(
        ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol)));
    int rc = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      if (!pollUntil(fd.get(), POLLOUT, deadline)) {
        attempt.error = "connect() timed out";
        continue;
      }
      socklen_t length = sizeof(err);
      DTRAIN_CHECK_ERRNO(getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &length));
    }
    if (err != 0) {
      attempt.error = "connect() failed: " + errnoString(err);
      continue;
    }
    attempt.socket = std::move(fd);
    attempt.error.clear();
    return attempt;
  }
  return attempt;
}

bool pollUntil(int fd, short events, SteadyTime deadline) {
  while (true) {
    pollfd entry{fd, events, 0};
    int rc = ::poll(&entry, 1, remainingMillis(deadline));
    if (rc > 0) return true;
    if (rc == 0) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      continue;  // poll rounds its timeout down; sleep out the remainder
    }
    if (errno != EINTR) throw errnoError("poll", errno);
  }
}

bool sendAll(int fd, std::string_view bytes, SteadyTime deadline) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n >= 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      throw errnoError("send", errno);
    }
    if (!pollUntil(fd, POLLOUT, deadline)) return false;
  }
  return true;
}

bool receiveAll(int fd, char* data, size_t size, SteadyTime deadline, const std::function<bool()>& stop) {
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::recv(fd, data + got, size - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) throw IoError("connection closed by the other side");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) throw errnoError("recv", errno);
    // Slices of at most 100 ms, so that `stop` is heard.
    while (true) {
      if (stop && stop()) return false;
      const SteadyTime now = std::chrono::steady_clock::now();
      if (now >= deadline) return false;
      if (pollUntil(fd, POLLIN, std::min(deadline, now + std::chrono::milliseconds(100)))) break;
    }
  }
  return true;
}

uint16_t freeTcpPort(bool loopback_only, const std::string& purpose) {
  FileDescriptor fd(DTRAIN_CHECK_ERRNO(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(loopback_only ? INADDR_LOOPBACK : INADDR_ANY);
  DTRAIN_CHECK_ERRNO(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr),
                     "no free port for " + purpose);
  return localPort(fd.get());
}

namespace {

std::optional<SocketEndpoint> endpointOf(int (*name_of)(int, sockaddr*, socklen_t*), int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (name_of(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return std::nullopt;
  char text[INET6_ADDRSTRLEN] = {0};
  SocketEndpoint endpoint;
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
    endpoint.port = ntohs(v4.sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text));
    endpoint.port = ntohs(v6.sin6_port);
  } else {
    return std::nullopt;
  }
  endpoint.ip = text;
  return endpoint;
}

}  // namespace

std::optional<SocketEndpoint> localEndpoint(int fd) { return endpointOf(::getsockname, fd); }

std::optional<SocketEndpoint> peerEndpoint(int fd) { return endpointOf(::getpeername, fd); }

std::string boundAddressText(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  DTRAIN_CHECK_ERRNO(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length));
  return socketAddressText(reinterpret_cast<sockaddr*>(&address), length);
}

std::optional<AcceptedConnection> acceptConnection(int listen_fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return std::nullopt;
  return AcceptedConnection{FileDescriptor(fd), socketAddressText(reinterpret_cast<sockaddr*>(&address), length)};
}

bool setListenBacklog(int fd, int backlog) { return ::listen(fd, backlog) == 0; }

bool setReuseAddress(int fd) {
  int one = 1;
  return ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0;
}

void shutdownSending(int fd) { ::shutdown(fd, SHUT_WR); }

ssize_t receiveSome(int fd, char* data, size_t size) {
  ssize_t n;
  do {
    n = ::recv(fd, data, size, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  return n;
}

ssize_t sendSome(int fd, const char* data, size_t size) {
  ssize_t n;
  do {
    n = ::send(fd, data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

}  // namespace dtrain
