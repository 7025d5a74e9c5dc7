#include "comm/gloo/device.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gloo/transport/tcp/device.h>

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

std::optional<std::string> socketLocalAddress(int fd) {
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) return std::nullopt;
  char text[INET6_ADDRSTRLEN] = {0};
  const void* address = local.ss_family == AF_INET6
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
  if (inet_ntop(local.ss_family, address, text, sizeof(text)) == nullptr) return std::nullopt;
  return std::string(text);
}

}  // namespace

std::string GlooDeviceChoice::describe() const {
  if (!iface.empty()) return "interface " + iface + " (" + reason + ")";
  return "hostname " + hostname + " (" + reason + ")";
}

std::optional<std::string> localAddressTowards(const std::string& master_addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* results = nullptr;
  // Any port: connect() on a UDP socket only picks a route and a source address.
  if (getaddrinfo(master_addr.c_str(), "9", &hints, &results) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (addrinfo* ai = results; ai != nullptr && !found; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) found = socketLocalAddress(fd);
    close(fd);
  }
  freeaddrinfo(results);
  return found;
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
  if (auto local = localAddressTowards(*master)) {
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
