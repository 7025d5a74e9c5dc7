// The Gloo TCP device: which local address this rank listens on and
// advertises to its peers.
//
// Choice, first that applies:
//   DTRAIN_GLOO_IFACE     the address of that network interface (e.g. eth0);
//   DTRAIN_GLOO_HOSTNAME  that hostname or address;
//   MASTER_ADDR           the local address this host uses to reach it (so a
//                         multi-node job works without configuration): a
//                         loopback address for localhost or 127.0.0.1, the
//                         name itself for another name of this host
//                         (localAddressToward() in common/address.h);
//   otherwise             127.0.0.1 (single-host jobs and tests).
#pragma once

#include <signal.h>

#include <memory>
#include <string>

namespace gloo::transport {
class Device;
}

namespace dtrain {

struct GlooDeviceChoice {
  std::string hostname;  // set unless iface is
  std::string iface;
  std::string reason;    // for logs and errors: "DTRAIN_GLOO_HOSTNAME", ...

  std::string describe() const;  // "hostname 10.0.0.5 (route to MASTER_ADDR=...)"
};

// The choice from the environment, per the list above.
GlooDeviceChoice chooseGlooDevice();
std::shared_ptr<gloo::transport::Device> createGlooDevice(const GlooDeviceChoice& choice);

// Gloo writes to its sockets without MSG_NOSIGNAL, so writing to a peer that
// died raises SIGPIPE, whose default action kills this process before Gloo
// can report the error. Threads that touch Gloo sockets therefore block
// SIGPIPE (the write fails with EPIPE instead), leaving the process-wide
// disposition to the application. Threads inherit the mask: Gloo's device
// thread and the communicator's worker, created inside this scope, keep it
// blocked for good; the creating thread gets its old mask back, minus any
// SIGPIPE raised meanwhile.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock();
  ~ScopedSigpipeBlock();
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t previous_;
};

}  // namespace dtrain
