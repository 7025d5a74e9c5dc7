#include "doctor/peer_link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <memory>
#include <thread>

#include "common/error.h"
#include "common/log.h"

namespace dtrain::doctor {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kMagic[8] = {'D', 'T', 'D', 'P', 'E', 'E', 'R', '1'};
constexpr uint64_t kMaxTransferBytes = 1ULL << 30;
constexpr uint64_t kGaugeBytes = 1ULL << 20;
constexpr size_t kChunkBytes = 1 << 20;
// A server connection with nothing to read for this long is dropped.
constexpr auto kServerIdleLimit = std::chrono::seconds(60);

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string peerForm(bool allow_port_zero) {
  return std::string("expected HOST:PORT or [IPV6]:PORT with PORT in ") + (allow_port_zero ? "0" : "1") +
         "..65535";
}

void encode(uint64_t value, unsigned char out[8]) {
  for (int i = 7; i >= 0; --i, value >>= 8) out[i] = static_cast<unsigned char>(value & 0xff);
}
uint64_t decode(const unsigned char in[8]) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value = (value << 8) | in[i];
  return value;
}

int millisUntil(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 100));
}

// Waits for `events` on a non-blocking socket in slices of <= 100 ms.
// false when `deadline` passes or `stop` says so first.
bool waitFor(int fd, short events, Clock::time_point deadline, const std::function<bool()>& stop = {}) {
  while (true) {
    if (stop && stop()) return false;
    if (Clock::now() >= deadline) return false;
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, millisUntil(deadline));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return true;  // the next call reports the error
  }
}

// Sends (receives) exactly `size` bytes on a non-blocking socket before
// `deadline`: an empty string on success, else why not.
std::string sendAll(int fd, const char* data, size_t size, Clock::time_point deadline) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::send(fd, data + done, size - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!waitFor(fd, POLLOUT, deadline)) return "timed out sending";
      continue;
    }
    return "send failed: " + errnoString(errno);
  }
  return {};
}

std::string receiveAll(int fd, char* data, size_t size, Clock::time_point deadline,
                       const std::function<bool()>& stop = {}) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::recv(fd, data + done, size - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return "connection closed by the other side";
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (!waitFor(fd, POLLIN, deadline, stop)) return "timed out receiving";
      continue;
    }
    return "recv failed: " + errnoString(errno);
  }
  return {};
}

void setNonBlocking(int fd) {
  int flags = DTRAIN_CHECK_ERRNO(::fcntl(fd, F_GETFL, 0));
  DTRAIN_CHECK_ERRNO(::fcntl(fd, F_SETFL, flags | O_NONBLOCK));
}

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { ::freeaddrinfo(info); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

AddrInfoList resolve(const std::string& host, uint16_t port, bool passive, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) {
    error = "cannot resolve '" + host + "': " + ::gai_strerror(rc);
    return nullptr;
  }
  return AddrInfoList(result);
}

std::string numericAddress(const sockaddr* address, socklen_t length) {
  char host[NI_MAXHOST], service[NI_MAXSERV];
  if (::getnameinfo(address, length, host, sizeof(host), service, sizeof(service),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  if (address->sa_family == AF_INET6) return "[" + std::string(host) + "]:" + service;
  return std::string(host) + ":" + service;
}

// One transfer of `bytes`; fills `seconds`. Empty string on success.
std::string timedTransfer(int fd, uint64_t bytes, Clock::time_point deadline, double& seconds) {
  static const std::string chunk(kChunkBytes, '\x5a');
  auto start = Clock::now();
  unsigned char header[8];
  encode(bytes, header);
  if (auto e = sendAll(fd, reinterpret_cast<const char*>(header), 8, deadline); !e.empty()) return e;
  for (uint64_t sent = 0; sent < bytes;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, bytes - sent));
    if (auto e = sendAll(fd, chunk.data(), n, deadline); !e.empty()) return e;
    sent += n;
  }
  unsigned char answer[8];
  if (auto e = receiveAll(fd, reinterpret_cast<char*>(answer), 8, deadline); !e.empty()) {
    return e == "timed out receiving" ? "no answer to the transfer in time" : e;
  }
  if (decode(answer) != bytes) return "the peer answered with a wrong byte count (not a dtrain doctor peer?)";
  seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return {};
}

// Serves one client until it hangs up, breaks the protocol, idles or `stop`.
void serveConnection(int fd, const std::atomic<bool>& stop) {
  Socket socket(fd);
  auto stopped = [&] { return stop.load(); };
  std::vector<char> buffer(kChunkBytes);
  auto idle_deadline = [] { return Clock::now() + kServerIdleLimit; };
  char magic[8];
  if (!receiveAll(fd, magic, 8, idle_deadline(), stopped).empty()) return;
  if (std::memcmp(magic, kMagic, 8) != 0) return;
  while (!stop.load()) {
    unsigned char header[8];
    if (!receiveAll(fd, reinterpret_cast<char*>(header), 8, idle_deadline(), stopped).empty()) return;
    uint64_t bytes = decode(header);
    if (bytes == 0 || bytes > kMaxTransferBytes) return;
    for (uint64_t got = 0; got < bytes;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), bytes - got));
      if (!receiveAll(fd, buffer.data(), n, idle_deadline(), stopped).empty()) return;
      got += n;
    }
    if (!sendAll(fd, reinterpret_cast<const char*>(header), 8, idle_deadline()).empty()) return;
  }
}

}  // namespace

PeerAddress parsePeerAddress(const std::string& text, const std::string& flag, bool allow_port_zero) {
  auto bad = [&](const std::string& why) {
    return ConfigError(flag + " entry '" + text + "': " + why + "; " + peerForm(allow_port_zero));
  };
  PeerAddress address;
  address.text = text;
  std::string port_text;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      throw bad("an IPv6 address needs the form [ADDRESS]:PORT");
    }
    address.host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos) throw bad("no port");
    if (text.find(':') != colon) throw bad("an IPv6 address must be in brackets");
    address.host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  if (address.host.empty()) throw bad("no host");
  if (port_text.empty()) throw bad("no port");
  if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos) {
    throw bad("port '" + port_text + "' is not a number");
  }
  int port = std::stoi(port_text);
  if (port > 65535 || (port == 0 && !allow_port_zero)) throw bad("port " + port_text + " is out of range");
  address.port = static_cast<uint16_t>(port);
  return address;
}

std::vector<PeerAddress> parsePeerList(const std::string& text) {
  std::vector<PeerAddress> peers;
  size_t begin = 0;
  while (true) {
    size_t comma = text.find(',', begin);
    std::string item = text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (item.empty()) {
      throw ConfigError("--peers '" + text + "': entry " + std::to_string(peers.size() + 1) + " is empty; " +
                        "expected HOST:PORT[,HOST:PORT...]");
    }
    peers.push_back(parsePeerAddress(item, "--peers", false));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return peers;
}

PeerMeasurement measurePeer(const PeerAddress& peer, double timeout_seconds, uint64_t max_bytes) {
  PeerMeasurement result;
  auto start = Clock::now();
  auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  std::string error;
  AddrInfoList addresses = resolve(peer.host, peer.port, false, error);
  if (!addresses) {
    result.error = error;
    return result;
  }
  int fd = -1;
  for (addrinfo* a = addresses.get(); a != nullptr && fd < 0; a = a->ai_next) {
    int candidate = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (candidate < 0) {
      error = "socket failed: " + errnoString(errno);
      continue;
    }
    auto connect_start = Clock::now();
    int rc = ::connect(candidate, a->ai_addr, a->ai_addrlen);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      if (!waitFor(candidate, POLLOUT, deadline)) {
        err = ETIMEDOUT;
      } else {
        socklen_t length = sizeof(err);
        ::getsockopt(candidate, SOL_SOCKET, SO_ERROR, &err, &length);
      }
    }
    if (err != 0) {
      error = err == ETIMEDOUT ? "connect timed out" : "connect failed: " + errnoString(err);
      ::close(candidate);
      continue;
    }
    result.connect_ms = std::chrono::duration<double, std::milli>(Clock::now() - connect_start).count();
    fd = candidate;
  }
  if (fd < 0) {
    result.error = error;
    return result;
  }
  Socket socket(fd);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (auto e = sendAll(fd, kMagic, 8, deadline); !e.empty()) {
    result.error = e;
    return result;
  }
  uint64_t gauge = std::min(kGaugeBytes, std::max<uint64_t>(max_bytes, 1));
  double gauge_seconds = 0;
  if (auto e = timedTransfer(fd, gauge, deadline, gauge_seconds); !e.empty()) {
    result.error = e;
    return result;
  }
  result.bytes = gauge;
  result.seconds = gauge_seconds;
  double left = std::chrono::duration<double>(deadline - Clock::now()).count();
  double rate = static_cast<double>(gauge) / std::max(gauge_seconds, 1e-6);
  uint64_t next = std::min<uint64_t>(max_bytes, static_cast<uint64_t>(rate * left * 0.5));
  next -= next % kGaugeBytes;
  if (next > gauge) {
    double seconds = 0;
    if (timedTransfer(fd, next, deadline, seconds).empty()) {
      result.bytes = next;
      result.seconds = seconds;
    }
  }
  result.reachable = true;
  result.gbit_per_s = static_cast<double>(result.bytes) * 8 / std::max(result.seconds, 1e-9) / 1e9;
  return result;
}

PeerServer::PeerServer(const PeerAddress& listen) {
  std::string error;
  AddrInfoList addresses = resolve(listen.host, listen.port, true, error);
  if (!addresses) throw IoError("--serve-peer " + listen.text + ": " + error);
  for (addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = "socket failed: " + errnoString(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      error = "bind/listen failed: " + errnoString(errno);
      ::close(fd);
      continue;
    }
    setNonBlocking(fd);
    listen_fd_ = fd;
    return;
  }
  throw IoError("--serve-peer " + listen.text + ": " + error);
}

PeerServer::~PeerServer() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

std::string PeerServer::boundAddress() const {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  DTRAIN_CHECK_ERRNO(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length));
  return numericAddress(reinterpret_cast<sockaddr*>(&address), length);
}

void PeerServer::serve(const std::function<bool()>& should_stop) {
  std::atomic<bool> stop{false};
  struct Connection {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<Connection> connections;
  while (!should_stop()) {
    pollfd p{listen_fd_, POLLIN, 0};
    int rc = ::poll(&p, 1, 100);
    if (rc > 0) {
      sockaddr_storage address{};
      socklen_t length = sizeof(address);
      int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        DTRAIN_LOG_DEBUG("dtrain doctor --serve-peer: client "
                         << numericAddress(reinterpret_cast<sockaddr*>(&address), length));
        auto done = std::make_shared<std::atomic<bool>>(false);
        connections.push_back({std::thread([fd, done, &stop] {
                                 serveConnection(fd, stop);
                                 done->store(true);
                               }),
                               done});
      }
    }
    for (auto it = connections.begin(); it != connections.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = connections.erase(it);
      } else {
        ++it;
      }
    }
  }
  stop.store(true);
  for (Connection& connection : connections) connection.thread.join();
}

}  // namespace dtrain::doctor
