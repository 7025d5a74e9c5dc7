// Rendezvous (rendezvous/): agents on every node agree on who takes part in
// this attempt, in which order, and under which generation. No torch, no CUDA.
//
// Contract:
// - nextRendezvous() blocks until a round completes (or join_timeout passes:
//   TimeoutError naming the endpoint, the run id, and how many nodes joined of
//   the minimum). Every agent of the round gets the same generation and
//   world; group ranks are 0..nnodes-1, and worker ranks are contiguous per
//   node in group-rank order (node g's workers are rank_offset ..
//   rank_offset + local_world_size - 1).
// - The result's `store` is the job store already prefixed with
//   "/run/<run_id>/gen/<generation>", so an attempt never reads the keys of
//   the last one. `root_store` is the unprefixed job store (global restart
//   count, etc.).
// - numNodesWaiting() > 0 tells an agent whose group is running that another
//   node wants in (dynamic, below max nodes): the agent restarts its workers
//   and calls nextRendezvous() again without consuming a restart.
// - A node that stops heartbeating (keep-alive) is dropped from the next
//   round by the others.
// - shutdown() marks the run closed: later joiners fail with a ConfigError
//   ("rendezvous '<id>' is closed: ..."), and agents waiting in a round
//   stop waiting with the same error. It never throws (a store that is gone
//   is logged): it runs on the way out, after the error that matters. On
//   the agent that hosts the store it then keeps serving until the other
//   agents have disconnected (close_timeout at most), so the host, often
//   first out, does not cut its peers off in their exit barrier.
// - The generation: static counts each agent's own calls (0, 1, ...; a
//   static job restarts as a gang); c10d uses the round number kept in the
//   store, so a node joining later gets the generation of the round it
//   joins.
// - Backends: static_rendezvous.h and dynamic_rendezvous.h describe the
//   rounds and the keys they use under /run/<run_id>/rdzv/. etcd runs the
//   dynamic rounds over an etcd cluster (etcd_job_store.h) instead of a
//   store one agent hosts.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dtrain {

class Store;
class TcpStoreServer;

// Where the rounds are kept (torchrun's --rdzv-backend).
enum class RendezvousBackend {
  kStatic,  // fixed nodes and node ranks; node rank 0 hosts the store
  kC10d,    // dynamic MIN:MAX rounds in a store one agent hosts
  kEtcd,    // dynamic rounds in an etcd cluster (etcd_job_store.h)
};
// "static", "c10d" or "etcd", for messages.
std::string rendezvousBackendName(RendezvousBackend backend);

struct RendezvousConfig {
  std::string run_id = "none";
  RendezvousBackend backend = RendezvousBackend::kStatic;
  // etcd: the cluster's client endpoints ("host:port"); endpoint_host/port
  // are the first, for messages.
  std::vector<std::string> etcd_endpoints;
  std::string endpoint_host = "127.0.0.1";
  uint16_t endpoint_port = 29400;
  int min_nodes = 1;
  int max_nodes = 1;
  int node_rank = -1;              // static: required; c10d: ignored (-1)
  int local_world_size = 1;        // workers this agent runs
  std::string local_address;       // this agent's address as peers see it; "" =
                                   // the address of its route to the endpoint
  std::chrono::milliseconds join_timeout{std::chrono::seconds(600)};
  std::chrono::milliseconds last_call_timeout{std::chrono::seconds(30)};
  // How long the host's shutdown() keeps the store up for peers still connected.
  std::chrono::milliseconds close_timeout{std::chrono::seconds(30)};
  // A node is dead after keep_alive_interval x keep_alive_max_attempt of
  // silence: 6 s by default (torchrun: 5 s x 3 = 15 s), for re-formation
  // within 10 s of a loss; under a full test run on 2 cores (load average
  // up to 35) it raised no false alarm in 35 minutes of 3 agents
  // (bench/reliability/keepalive_false_alarms.sh).
  std::chrono::milliseconds keep_alive_interval{std::chrono::seconds(2)};
  int keep_alive_max_attempt = 3;
  // -1: decide by backend (static: node rank 0 hosts; c10d: an agent whose
  // machine owns the endpoint address hosts, the first of several on one
  // machine); 0/1: rdzv-conf is_host, for either backend. A static node
  // rank 0 or an is_host=1 agent whose port is taken fails (IoError naming
  // the address); a c10d agent that only inferred it should host connects
  // as a client instead (as torch's c10d backend does).
  int is_host = -1;
  std::string token;  // store token (DTRAIN_STORE_TOKEN)
};

struct RendezvousResult {
  int64_t generation = 0;
  int group_rank = 0;        // this node's rank
  int group_world_size = 1;  // nodes in this round
  int rank_offset = 0;       // global rank of this node's first worker
  int world_size = 1;        // workers in this round, all nodes
  std::shared_ptr<Store> store;       // prefixed "/run/<id>/gen/<generation>"
  std::shared_ptr<Store> root_store;  // the whole job store
  std::string store_host;    // host:port of the job store, for workers
  uint16_t store_port = 0;
  std::string store_url;     // etcd: "etcd://A,B,C" (workers' DTRAIN_STORE_ADDR); "" for TCP
  std::string master_addr;   // group rank 0's address (for PyTorch workers)
};

class RendezvousHandler {
 public:
  virtual ~RendezvousHandler() = default;
  virtual RendezvousResult nextRendezvous() = 0;
  virtual int numNodesWaiting() = 0;
  // The nodes of the round this agent runs in that its keep-alive found
  // gone ("node 3 at 10.0.0.4"), so the agent restarts its group at once
  // instead of waiting for its workers' collectives to time out. Empty
  // where the backend has no keep-alive (static).
  virtual std::vector<std::string> lostNodes() { return {}; }
  virtual void shutdown() = 0;
  virtual std::string describe() const = 0;  // "c10d rendezvous 'job1' at host:port"
  // "" unless this agent hosts the job store and its server stopped
  // serving; then why (the agent stops the job naming it).
  virtual std::string storeServerFailure() const { return ""; }
};

// Builds the handler for config.backend, hosting the job store on this agent
// when it is the host (static: node_rank 0; c10d: endpoint address is one of
// this host's, or is_host=1). The server listens from construction (the
// agent keeps its socket: no bind-and-release race). ConfigError for an
// inconsistent config, or etcd in a build without the etcd store.
std::unique_ptr<RendezvousHandler> createRendezvousHandler(const RendezvousConfig& config);

// True when `host` names an address of this machine (loopback, an interface
// address, or this host's name).
bool isLocalAddress(const std::string& host);

}  // namespace dtrain
