#include "comm/gloo/device.h"

#include <pthread.h>

#include <gloo/transport/tcp/device.h>

#include "common/address.h"
#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "common/settings.h"

namespace dtrain {
namespace {

DTRAIN_SETTING(std::string, kGlooIface, "gloo-iface", "DTRAIN_GLOO_IFACE", "",
               "Network interface the Gloo backend listens on (e.g. eth0). Wins over "
               "DTRAIN_GLOO_HOSTNAME.");
DTRAIN_SETTING(std::string, kGlooHostname, "gloo-hostname", "DTRAIN_GLOO_HOSTNAME", "",
               "Hostname or address the Gloo backend listens on and advertises to its peers. "
               "Default: this host's address on the route to MASTER_ADDR, else 127.0.0.1.");

constexpr const char* kLoopback = "127.0.0.1";

}  // namespace

std::string GlooDeviceChoice::describe() const {
  if (!iface.empty()) return "interface " + iface + " (" + reason + ")";
  return "hostname " + hostname + " (" + reason + ")";
}

GlooDeviceChoice chooseGlooDevice() {
  if (const std::string iface = kGlooIface.get(); !iface.empty()) {
    return {"", iface, "DTRAIN_GLOO_IFACE"};
  }
  if (const std::string hostname = kGlooHostname.get(); !hostname.empty()) {
    return {hostname, "", "DTRAIN_GLOO_HOSTNAME"};
  }
  const auto master = envString("MASTER_ADDR");
  if (!master || master->empty()) return {kLoopback, "", "default; MASTER_ADDR is not set"};
  if (auto local = localAddressToward(*master)) {
    return {*local, "", "this host's address towards MASTER_ADDR=" + *master};
  }
  DTRAIN_LOG_WARN("gloo: no route to MASTER_ADDR=" << *master << "; listening on " << kLoopback
                  << ", which only works on one host. Set DTRAIN_GLOO_HOSTNAME or DTRAIN_GLOO_IFACE.");
  return {kLoopback, "", "fallback; no route to MASTER_ADDR=" + *master};
}

std::shared_ptr<gloo::transport::Device> createGlooDevice(const GlooDeviceChoice& choice) {
  gloo::transport::tcp::attr attr;
  attr.hostname = choice.hostname;
  attr.iface = choice.iface;
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw ConfigError("gloo could not listen on " + choice.describe() + ": " + e.what() +
                      "; set DTRAIN_GLOO_HOSTNAME to an address of this host, or DTRAIN_GLOO_IFACE "
                      "to an interface");
  }
}

ScopedSigpipeBlock::ScopedSigpipeBlock() {
  sigset_t pipe_only;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &previous_);
}

ScopedSigpipeBlock::~ScopedSigpipeBlock() {
  if (sigismember(&previous_, SIGPIPE)) return;  // the caller blocks it already
  sigset_t pipe_only;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  // Unblocking would deliver a SIGPIPE raised inside the scope: consume it.
  const timespec no_wait{0, 0};
  while (sigtimedwait(&pipe_only, nullptr, &no_wait) > 0) {
  }
  pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

}  // namespace dtrain
