// The dynamic rendezvous (torchrun --rdzv-backend c10d): MIN:MAX nodes that
// may come and go, modelled on torch's DynamicRendezvousHandler. The agent
// whose address is the endpoint's hosts the job store; state lives under
// /run/<id>/rdzv/ in it:
//   state             the RendezvousState (rendezvous_state.h), compareSet only
//   next_node_id      counter giving each handler its node id ("1", "2", ...)
//   node/<id>         "<local_world_size> <address>" of each node
//   heartbeat/<id>    each node's keep-alive counter (keep_alive.h)
//
// nextRendezvous(): leave the round this agent was in (it becomes
// "departed"), then join the open round, or wait in `waiting` while a
// complete round runs without this agent (numNodesWaiting() of its
// members then says so and they come back). A round completes at max_nodes,
// or last_call_timeout after it first had min_nodes (later joiners do not
// extend the window); each agent times the window from when it first saw
// min_nodes, and the first whose window ends completes the round. Group
// ranks follow join order. While waiting, every agent drops the nodes its
// keep-alive finds dead, so a dead node cannot hold a round open or closed.
//
// Threads: nextRendezvous() and numNodesWaiting() from one thread (the
// agent's); shutdown() from any.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/job_store.h"
#include "rendezvous/keep_alive.h"
#include "rendezvous/rendezvous.h"
#include "rendezvous/rendezvous_state.h"

namespace dtrain {

class DynamicRendezvousHandler : public RendezvousHandler {
 public:
  // Reaches the store (hosting it as `role` says), takes a node id,
  // publishes this node's info and starts the keep-alive.
  DynamicRendezvousHandler(const RendezvousConfig& config, StoreRole role);
  // The same over a store reached through `link` (etcd), described by `label`.
  DynamicRendezvousHandler(const RendezvousConfig& config, std::string label,
                           std::unique_ptr<JobStoreLink> link);
  // Stops the keep-alive without leaving the run: peers find this node dead.
  ~DynamicRendezvousHandler() override;

  RendezvousResult nextRendezvous() override;
  int numNodesWaiting() override;
  std::vector<std::string> lostNodes() override;
  void shutdown() override;
  std::string describe() const override { return label_; }
  std::string storeServerFailure() const override { return endpoint_ ? endpoint_->serverFailure() : ""; }

  const std::string& nodeId() const { return node_id_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Snapshot {
    std::string text;  // as stored: the compareSet expectation
    RendezvousState state;
  };

  Snapshot read(Store& store) const;
  // compareSet of the whole state; true when `desired` is what is stored now.
  bool write(Store& store, const Snapshot& seen, const RendezvousState& desired) const;
  // Each returns true when it changed `state`.
  bool dropDeadNodes(RendezvousState& state, std::vector<std::string>& dropped) const;
  bool leave(RendezvousState& state) const;
  bool join(RendezvousState& state);
  RendezvousResult finish(Store& store, const RendezvousState& state) const;
  [[noreturn]] void timedOut(Store& store, const RendezvousState& state) const;

  const RendezvousConfig config_;
  const std::string label_;
  const std::string prefix_;     // "/run/<id>/rdzv"
  const std::string state_key_;  // prefix_ + "/state"
  std::unique_ptr<JobStoreLink> endpoint_;
  std::string node_id_;
  std::unique_ptr<KeepAlive> keep_alive_;  // after endpoint_: stops first
  // The last-call window of the open round, as this agent times it.
  int64_t window_round_ = -1;
  Clock::time_point window_start_;
};

}  // namespace dtrain
