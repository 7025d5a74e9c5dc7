#include "comm/world.h"

#include "common/address.h"
#include "common/env.h"
#include "common/error.h"
#include "common/settings.h"
#include "store/prefix_store.h"
#include "store/tcp_store.h"
#if DTRAIN_WITH_ETCD_STORE
#include "store/etcd_store.h"
#endif

namespace dtrain {
namespace {

DTRAIN_SETTING(std::string, kStoreAddr, "store-addr", "DTRAIN_STORE_ADDR", "",
               "host:port of the launcher's rendezvous store; when unset, rank 0 hosts a store "
               "at MASTER_ADDR:MASTER_PORT.");
DTRAIN_SETTING(std::string, kStorePrefix, "store-prefix", "DTRAIN_STORE_PREFIX", "",
               "Key prefix of this attempt in the rendezvous store (set by dtrain launch).");

std::string checkConnectTimeout(const double& seconds) {
  return seconds > 0 && seconds <= 7 * 24 * 3600 ? "" : "a number of seconds > 0 and <= 604800";
}

DTRAIN_SETTING_CHECKED(double, kStoreConnectTimeout, "store-connect-timeout", "DTRAIN_STORE_CONNECT_TIMEOUT", 60.0,
                       "Seconds a worker keeps retrying to reach the rendezvous store before giving up.",
                       checkConnectTimeout);

uint16_t parsePort(const std::string& text, const std::string& what) {
  int64_t port = parseInt64(text, what);
  if (port < 1 || port > 65535) {
    throw ConfigError(what + "=" + text + " is not a TCP port; expected 1..65535");
  }
  return static_cast<uint16_t>(port);
}

// Where rank 0's store listens for MASTER_ADDR `host`: a loopback address
// or "localhost" as given (no other host can reach it anyway), a numeric
// address of this machine as given, anything else (a name, or an address
// this machine does not hold, as behind a NAT) the wildcard.
std::string workerStoreBindAddress(const std::string& host) {
  const std::string bare = withoutBrackets(host);
  if (bare == "localhost" || isLoopbackLiteral(bare)) return bare;
  if (isNumericAddress(bare) && resolvesToThisMachine(bare)) return bare;
  return bare.find(':') != std::string::npos ? "::" : "0.0.0.0";
}

}  // namespace

World worldFromEnvironment() {
  const std::string why = "run under `dtrain launch` or torchrun, or set RANK, WORLD_SIZE, "
                          "MASTER_ADDR and MASTER_PORT";
  World world;
  world.size = static_cast<int>(requireEnvInt("WORLD_SIZE", 1, 1 << 20, why));
  world.rank = static_cast<int>(requireEnvInt("RANK", 0, 1 << 20, why));
  if (world.rank >= world.size) {
    throw ConfigError("RANK=" + std::to_string(world.rank) + " is out of range for WORLD_SIZE=" +
                      std::to_string(world.size) + "; expected 0.." + std::to_string(world.size - 1));
  }
  world.local_rank = static_cast<int>(envInt("LOCAL_RANK", 0, 1 << 16).value_or(0));
  world.local_world_size = static_cast<int>(envInt("LOCAL_WORLD_SIZE", 1, 1 << 16).value_or(1));

  TcpStoreClientOptions client;
  client.token = storeTokenFromEnvironment();
  client.connect_timeout = Milliseconds(static_cast<int64_t>(kStoreConnectTimeout.get() * 1000));
  std::string prefix = kStorePrefix.get();
  const std::string launcher_store = kStoreAddr.get();
  if (launcher_store.rfind("etcd://", 0) == 0) {
    // The launcher's job store is an etcd cluster (--rdzv-backend etcd).
#if DTRAIN_WITH_ETCD_STORE
    EtcdStoreOptions etcd;
    etcd.endpoints = parseEtcdEndpoints(launcher_store.substr(7));
    // key_prefix: the default, as the launcher's (etcd_job_store.cc).
    etcd.connect_timeout = client.connect_timeout;
    world.open_store = [etcd, prefix]() -> std::shared_ptr<Store> {
      std::shared_ptr<Store> store = std::make_shared<EtcdStore>(etcd);
      if (!prefix.empty()) store = std::make_shared<PrefixStore>(prefix, store);
      return store;
    };
    world.store_address = launcher_store;
    world.store = world.open_store();
    return world;
#else
    throw ConfigError("DTRAIN_STORE_ADDR='" + launcher_store +
                      "' names an etcd cluster, but this dtrain was built without the etcd store");
#endif
  }
  if (!launcher_store.empty()) {
    auto colon = launcher_store.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      throw ConfigError("DTRAIN_STORE_ADDR='" + launcher_store + "' is not host:port");
    }
    client.host = launcher_store.substr(0, colon);
    client.port = parsePort(launcher_store.substr(colon + 1), "DTRAIN_STORE_ADDR port");
  } else {
    client.host = requireEnv("MASTER_ADDR", why);
    client.port = parsePort(requireEnv("MASTER_PORT", why), "MASTER_PORT");
    if (world.rank == 0) {
      TcpStoreServerOptions server;
      // Bind where the others will connect, and no wider: a loopback
      // MASTER_ADDR (a job on one host) or this host's numeric address is
      // bound as given; a name (which may stand for several of this host's
      // addresses) gets the wildcard.
      server.bind_address = workerStoreBindAddress(client.host);
      server.port = client.port;
      server.token = client.token;
      world.server = std::make_shared<TcpStoreServer>(server);
    }
  }
  if (client.host.size() > 2 && client.host.front() == '[' && client.host.back() == ']') {
    client.host = client.host.substr(1, client.host.size() - 2);
  }
  world.store_address = client.host + ":" + std::to_string(client.port);
  world.open_store = [client, prefix]() -> std::shared_ptr<Store> {
    std::shared_ptr<Store> store = std::make_shared<TcpStore>(client);
    if (!prefix.empty()) store = std::make_shared<PrefixStore>(prefix, store);
    return store;
  };
  world.store = world.open_store();
  return world;
}

void leaveWorld(World& world, Milliseconds timeout) {
  const std::string name = "world/exit";
  if (world.server) {
    storeBarrier(*world.store, name, world.size, timeout);
  } else if (world.store->add(name + "/count", 1) == world.size) {
    world.store->set(name + "/done", "1");
  }
}

}  // namespace dtrain
