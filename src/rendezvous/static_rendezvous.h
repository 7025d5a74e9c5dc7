// The static rendezvous (torchrun --rdzv-backend static, the default when
// only --node-rank and --master-addr are given): a fixed set of max_nodes
// nodes, each told its node rank; node rank 0 hosts the job store.
//
// A round: every agent publishes "<local_world_size> <address>" under
// /run/<id>/rdzv/static/<generation>/node/<node rank> and waits for all
// max_nodes keys (join_timeout: TimeoutError naming the missing node ranks).
// Group rank = node rank.
//
// Generation: each agent counts its own calls (0, 1, 2, ...). A static job
// restarts as a gang, so every agent makes the same number of calls and the
// counts agree without a shared counter; a shared one would need a second
// agreement on who increments it. An agent process that itself restarts
// mid-run starts again at 0 and cannot rejoin its peers (nor can torchrun's).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "rendezvous/job_store.h"
#include "rendezvous/rendezvous.h"

namespace dtrain {

class StaticRendezvousHandler : public RendezvousHandler {
 public:
  // ConfigError unless node_rank is in [0, max_nodes) and min == max; then
  // reaches the store (hosting it as `role` says).
  StaticRendezvousHandler(const RendezvousConfig& config, StoreRole role);

  RendezvousResult nextRendezvous() override;
  int numNodesWaiting() override { return 0; }  // membership is fixed
  void shutdown() override;
  std::string describe() const override { return label_; }
  std::string storeServerFailure() const override { return endpoint_ ? endpoint_->serverFailure() : ""; }

 private:
  std::string nodeKey(int64_t generation, int node_rank) const;

  RendezvousConfig config_;
  std::string label_;
  std::string closed_key_;
  std::unique_ptr<JobStoreEndpoint> endpoint_;
  int64_t next_generation_ = 0;
};

}  // namespace dtrain
