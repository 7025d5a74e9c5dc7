#include "rendezvous/etcd_job_store.h"

#include "common/address.h"
#include "common/error.h"
#include "store/etcd_store.h"
#include "store/prefix_store.h"

namespace dtrain {
namespace {

// etcd's own failover (a member that has not yet noticed its leader died
// holds a request this long) is part of every re-formation after a loss:
// short, but above a loaded machine's latency.
constexpr std::chrono::milliseconds kEtcdRequestTimeout{2000};

std::string hostOf(const std::string& endpoint) {
  std::string host = endpoint.substr(0, endpoint.rfind(':'));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

}  // namespace

std::string etcdStoreUrl(const std::vector<std::string>& endpoints) {
  std::string url = "etcd://";
  for (size_t i = 0; i < endpoints.size(); ++i) url += (i ? "," : "") + endpoints[i];
  return url;
}

EtcdJobStore::EtcdJobStore(const RendezvousConfig& config, std::string label)
    : config_(config), label_(std::move(label)) {
  if (config_.etcd_endpoints.empty()) {
    throw ConfigError(label_ + ": no etcd endpoints; expected --rdzv-endpoint HOST:PORT[,HOST:PORT...]");
  }
  try {
    main_ = connectStore(config_.join_timeout);
  } catch (const TimeoutError& e) {
    throw TimeoutError(label_ + ": no etcd member answered within the join timeout: " + e.message());
  }
  local_address_ = config_.local_address.empty()
                       ? localAddressToward(hostOf(config_.etcd_endpoints.front())).value_or("127.0.0.1")
                       : config_.local_address;
}

EtcdJobStore::~EtcdJobStore() = default;

std::shared_ptr<EtcdStore> EtcdJobStore::connectStore(std::chrono::milliseconds connect_timeout) const {
  EtcdStoreOptions options;
  options.endpoints = config_.etcd_endpoints;
  // key_prefix: EtcdStoreOptions' default, which the workers use too.
  options.request_timeout = kEtcdRequestTimeout;
  options.connect_timeout = connect_timeout;
  // As for the c10d store: an agent out of touch for longer is dead to its
  // peers anyway, and its presence lease lives as long.
  const auto dead_after = config_.keep_alive_interval * config_.keep_alive_max_attempt;
  options.call_timeout = dead_after;
  options.session_ttl = dead_after;
  return std::make_shared<EtcdStore>(options);
}

std::shared_ptr<Store> EtcdJobStore::connectAnother(std::chrono::milliseconds connect_timeout) const {
  return connectStore(connect_timeout);
}

RendezvousResult EtcdJobStore::resultFor(const std::string& run_id, int64_t generation) const {
  RendezvousResult result;
  result.generation = generation;
  result.root_store = main_;
  result.store = std::make_shared<PrefixStore>("/run/" + run_id + "/gen/" + std::to_string(generation), main_);
  result.store_url = etcdStoreUrl(config_.etcd_endpoints);
  result.store_host = config_.endpoint_host;
  result.store_port = config_.endpoint_port;
  return result;
}

}  // namespace dtrain
