#include "doctor/peer_link.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <list>
#include <memory>
#include <optional>
#include <thread>

#include "common/error.h"
#include "common/socket.h"
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

// The peer protocol reports failures as text (a measurement's error); these
// turn the socket seam's answers into it: "" on success, else why not.
std::string sendBytes(int fd, const char* data, size_t size, Clock::time_point deadline) {
  try {
    return sendAll(fd, std::string_view(data, size), deadline) ? "" : "timed out sending";
  } catch (const IoError& e) {
    return e.message();
  }
}

std::string receiveBytes(int fd, char* data, size_t size, Clock::time_point deadline,
                         const std::function<bool()>& stop = {}) {
  try {
    return receiveAll(fd, data, size, deadline, stop) ? "" : "timed out receiving";
  } catch (const IoError& e) {
    return e.message();
  }
}

// One transfer of `bytes`; fills `seconds`. Empty string on success.
std::string timedTransfer(int fd, uint64_t bytes, Clock::time_point deadline, double& seconds) {
  static const std::string chunk(kChunkBytes, '\x5a');
  auto start = Clock::now();
  unsigned char header[8];
  encode(bytes, header);
  if (auto e = sendBytes(fd, reinterpret_cast<const char*>(header), 8, deadline); !e.empty()) return e;
  for (uint64_t sent = 0; sent < bytes;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, bytes - sent));
    if (auto e = sendBytes(fd, chunk.data(), n, deadline); !e.empty()) return e;
    sent += n;
  }
  unsigned char answer[8];
  if (auto e = receiveBytes(fd, reinterpret_cast<char*>(answer), 8, deadline); !e.empty()) {
    return e == "timed out receiving" ? "no answer to the transfer in time" : e;
  }
  if (decode(answer) != bytes) return "the peer answered with a wrong byte count (not a dtrain doctor peer?)";
  seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return {};
}

// Serves one client until it hangs up, breaks the protocol, idles or `stop`.
void serveConnection(int fd, const std::atomic<bool>& stop) {
  FileDescriptor socket(fd);
  auto stopped = [&] { return stop.load(); };
  std::vector<char> buffer(kChunkBytes);
  auto idle_deadline = [] { return Clock::now() + kServerIdleLimit; };
  char magic[8];
  if (!receiveBytes(fd, magic, 8, idle_deadline(), stopped).empty()) return;
  if (std::memcmp(magic, kMagic, 8) != 0) return;
  while (!stop.load()) {
    unsigned char header[8];
    if (!receiveBytes(fd, reinterpret_cast<char*>(header), 8, idle_deadline(), stopped).empty()) return;
    uint64_t bytes = decode(header);
    if (bytes == 0 || bytes > kMaxTransferBytes) return;
    for (uint64_t got = 0; got < bytes;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), bytes - got));
      if (!receiveBytes(fd, buffer.data(), n, idle_deadline(), stopped).empty()) return;
      got += n;
    }
    if (!sendBytes(fd, reinterpret_cast<const char*>(header), 8, idle_deadline()).empty()) return;
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
  const auto connect_start = Clock::now();
  ConnectAttempt attempt =
      connectTcpOnce(peer.host, peer.port, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - start));
  if (!attempt.socket.valid()) {
    result.error = attempt.error;
    return result;
  }
  result.connect_ms = std::chrono::duration<double, std::milli>(Clock::now() - connect_start).count();
  const FileDescriptor& socket = attempt.socket;
  const int fd = socket.get();
  setNoDelay(fd);
  if (auto e = sendBytes(fd, kMagic, 8, deadline); !e.empty()) {
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
  try {
    listen_fd_ = listenTcp(listen.host, listen.port, 64).release();
  } catch (const IoError& e) {
    throw IoError("--serve-peer " + listen.text + ": " + e.message());
  }
}

PeerServer::~PeerServer() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

std::string PeerServer::boundAddress() const { return boundAddressText(listen_fd_); }

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
      if (std::optional<AcceptedConnection> client = acceptConnection(listen_fd_)) {
        DTRAIN_LOG_DEBUG("dtrain doctor --serve-peer: client " << client->peer);
        int fd = client->socket.release();
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
