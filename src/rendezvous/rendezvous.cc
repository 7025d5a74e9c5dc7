// createRendezvousHandler(): checks what every backend needs, decides who
// hosts the job store, and builds the backend's handler.
#include "rendezvous/rendezvous.h"

#include "common/error.h"
#include "rendezvous/dynamic_rendezvous.h"
#include "rendezvous/etcd_job_store.h"
#include "rendezvous/static_rendezvous.h"

namespace dtrain {
namespace {

void validateConfig(const RendezvousConfig& config) {
  auto fail = [](const std::string& why) { throw ConfigError("rendezvous config: " + why); };
  if (config.run_id.empty()) fail("the run id is empty (--rdzv-id)");
  if (config.endpoint_host.empty()) fail("the endpoint host is empty (--rdzv-endpoint)");
  if (config.endpoint_port == 0) fail("the endpoint port must be in 1..65535, got 0 (--rdzv-endpoint)");
  if (config.min_nodes < 1) {
    fail("the minimum number of nodes must be at least 1, got " + std::to_string(config.min_nodes) +
         " (--nnodes)");
  }
  if (config.max_nodes < config.min_nodes) {
    fail("the minimum number of nodes (" + std::to_string(config.min_nodes) +
         ") exceeds the maximum (" + std::to_string(config.max_nodes) + ") (--nnodes MIN:MAX)");
  }
  if (config.local_world_size < 1) {
    fail("the number of workers per node must be at least 1, got " +
         std::to_string(config.local_world_size) + " (--nproc-per-node)");
  }
  if (config.join_timeout.count() <= 0) {
    fail("join_timeout must be positive, got " + std::to_string(config.join_timeout.count()) + " ms");
  }
  if (config.last_call_timeout.count() < 0) {
    fail("last_call_timeout must not be negative, got " +
         std::to_string(config.last_call_timeout.count()) + " ms");
  }
  if (config.keep_alive_interval.count() <= 0) {
    fail("keep_alive_interval must be positive, got " +
         std::to_string(config.keep_alive_interval.count()) + " ms");
  }
  if (config.keep_alive_max_attempt < 1) {
    fail("keep_alive_max_attempt must be at least 1, got " +
         std::to_string(config.keep_alive_max_attempt));
  }
  if (config.is_host < -1 || config.is_host > 1) {
    fail("is_host must be 0 or 1, got " + std::to_string(config.is_host));
  }
}

StoreRole storeRole(const RendezvousConfig& config) {
  if (config.is_host == 1) return StoreRole::kHost;
  if (config.is_host == 0) return StoreRole::kClient;
  if (config.backend == RendezvousBackend::kStatic) return config.node_rank == 0 ? StoreRole::kHost : StoreRole::kClient;
  // Several agents of one job may share this machine: the first one hosts.
  return isLocalAddress(config.endpoint_host) ? StoreRole::kHostIfFree : StoreRole::kClient;
}

}  // namespace

std::string rendezvousBackendName(RendezvousBackend backend) {
  switch (backend) {
    case RendezvousBackend::kStatic: return "static";
    case RendezvousBackend::kC10d: return "c10d";
    case RendezvousBackend::kEtcd: return "etcd";
  }
  return "backend " + std::to_string(static_cast<int>(backend));
}

std::unique_ptr<RendezvousHandler> createRendezvousHandler(const RendezvousConfig& config) {
  if (config.backend == RendezvousBackend::kEtcd) {
    validateConfig(config);
#if DTRAIN_WITH_ETCD_STORE
    const std::string label = "etcd rendezvous '" + config.run_id + "' at " + etcdStoreUrl(config.etcd_endpoints);
    return std::make_unique<DynamicRendezvousHandler>(config, label, std::make_unique<EtcdJobStore>(config, label));
#else
    throw ConfigError("this dtrain was built without the etcd store (cpp-httplib was not found); "
                      "supported backends: static, c10d");
#endif
  }
  validateConfig(config);
  if (config.backend == RendezvousBackend::kStatic) {
    return std::make_unique<StaticRendezvousHandler>(config, storeRole(config));
  }
  return std::make_unique<DynamicRendezvousHandler>(config, storeRole(config));
}

}  // namespace dtrain
