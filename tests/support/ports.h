// Ports for a test's servers and rendezvous.
#pragma once

#include <cstdint>

#include "common/socket.h"

namespace dtrain::testing {

// A socket listening on 127.0.0.1 (port 0: any free one) while it lives, to
// hold a port or to be the thing a client connects to.
class LoopbackListener {
 public:
  explicit LoopbackListener(uint16_t port = 0);
  uint16_t port() const { return port_; }
  int fd() const { return socket_.get(); }

 private:
  FileDescriptor socket_;
  uint16_t port_ = 0;
};

// A port with nothing listening on it (bound once, then released), picked at
// random below the kernel's ephemeral range: ports there are never handed
// out by bind(0) or connect(), so no other process on a busy machine takes
// it between this call and the test's server binding it.
uint16_t freePort();

}  // namespace dtrain::testing
