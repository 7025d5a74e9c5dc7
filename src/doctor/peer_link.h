// The peer test of `dtrain doctor` (doctor/): is another node reachable over
// TCP, and how fast does a bulk transfer to it go.
//
// One side runs `dtrain doctor --serve-peer ADDR:PORT` (PeerServer); the
// other connects (measurePeer). Wire format, all integers big-endian:
//   client: "DTDPEER1", then transfers: u64 N (1 <= N <= 1 GiB) and N bytes
//   server: after the N bytes of a transfer, u64 N back
// The client times each transfer from its first byte to the answer: a first
// 1 MiB transfer gauges the link, a second one sized to fit half the time
// left (at most max_bytes) gives the bandwidth reported.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dtrain::doctor {

struct PeerAddress {
  std::string host;  // name, IPv4 or IPv6 literal (without brackets)
  uint16_t port = 0;
  std::string text;  // as given
};

// "host:port" or "[v6]:port" with port in 1..65535 (0 too when
// allow_port_zero). ConfigError naming `flag`, the entry and the form.
PeerAddress parsePeerAddress(const std::string& text, const std::string& flag, bool allow_port_zero);
// --peers: a comma list of host:port; an empty item is a ConfigError.
std::vector<PeerAddress> parsePeerList(const std::string& text);

struct PeerMeasurement {
  bool reachable = false;
  std::string error;        // why not, when !reachable
  double connect_ms = 0;    // TCP connect time: the latency figure
  uint64_t bytes = 0;       // size of the timed transfer
  double seconds = 0;       // its duration, first byte to the answer
  double gbit_per_s = 0;
};
constexpr uint64_t kPeerTransferBytes = 64ULL << 20;
// Never throws: every failure, the deadline included, is in `error`.
PeerMeasurement measurePeer(const PeerAddress& peer, double timeout_seconds,
                            uint64_t max_bytes = kPeerTransferBytes);

class PeerServer {
 public:
  // Binds and listens; IoError naming the address when it cannot.
  explicit PeerServer(const PeerAddress& listen);
  ~PeerServer();
  PeerServer(const PeerServer&) = delete;
  PeerServer& operator=(const PeerServer&) = delete;

  // "127.0.0.1:43127", "[::1]:43127": the address bound, port included.
  std::string boundAddress() const;
  // Accepts and answers clients, one thread each, until should_stop() says
  // true (asked every ~100 ms); then closes every connection and returns.
  void serve(const std::function<bool()>& should_stop);

 private:
  int listen_fd_ = -1;
};

}  // namespace dtrain::doctor
