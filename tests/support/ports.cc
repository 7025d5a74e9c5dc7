#include "tests/support/ports.h"

#include <algorithm>
#include <fstream>
#include <random>

#include "common/error.h"

namespace dtrain::testing {

LoopbackListener::LoopbackListener(uint16_t port) : socket_(listenTcp("127.0.0.1", port, 16)) {
  port_ = localPort(socket_.get());
}

uint16_t freePort() {
  int ephemeral_low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low;
  static std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> pick(std::max(1025, ephemeral_low - 10000), ephemeral_low - 1);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    try {
      return LoopbackListener(static_cast<uint16_t>(pick(random))).port();
    } catch (const IoError&) {
      // taken: pick again
    }
  }
  throw IoError("no free port below the ephemeral range after 1000 tries");
}

}  // namespace dtrain::testing
