// The job store kept in an etcd cluster (private to rendezvous/), for
// `--rdzv-backend etcd`: no agent hosts anything, so losing any one node,
// the first one included, is survived like any other node's loss; etcd
// itself survives losing a minority of its members. Rendezvous state, the
// global restart count, keep-alives (counters, and presence keys under an
// etcd lease: a killed agent's presence goes when its lease runs out, a
// stopped one's at once) and the workers' key-value traffic (DTRAIN_STORE_ADDR
// = etcd://A,B,C) all live under EtcdStoreOptions' default key prefix.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/job_store.h"

namespace dtrain {

class EtcdStore;

class EtcdJobStore : public JobStoreLink {
 public:
  // Connects to config.etcd_endpoints (retrying until join_timeout:
  // TimeoutError naming `label` and every endpoint).
  EtcdJobStore(const RendezvousConfig& config, std::string label);
  ~EtcdJobStore() override;

  std::shared_ptr<Store> mainStore() const override { return main_; }
  std::shared_ptr<Store> connectAnother(std::chrono::milliseconds connect_timeout) const override;
  RendezvousResult resultFor(const std::string& run_id, int64_t generation) const override;
  const std::string& localAddress() const override { return local_address_; }

 private:
  std::shared_ptr<EtcdStore> connectStore(std::chrono::milliseconds connect_timeout) const;

  RendezvousConfig config_;
  std::string label_;
  std::string local_address_;
  std::shared_ptr<Store> main_;
};

// "etcd://A,B,C": how workers are told to reach the job store.
std::string etcdStoreUrl(const std::vector<std::string>& endpoints);

}  // namespace dtrain
