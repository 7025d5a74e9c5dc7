// ElasticAgent: what `dtrain launch` runs on each node (launch/).
//
// Loop: rendezvous -> start this node's workers -> monitor. Then:
// - all workers exited 0: exit barrier (every node's group done, bounded by
//   exit_barrier_timeout), return 0;
// - a worker failed, here or on another node (gang semantics: the first
//   node to see a failure marks the generation failed in the store and every
//   agent stops its workers: SIGTERM, and SIGKILL 3 s later, since workers
//   of a failed gang can finish nothing; torchrun waits 30 s): if restarts remain, count one restart (global,
//   in the store) and go round again; else print the root-cause summary and
//   return its exit code;
// - another node is waiting to join (MIN < nodes < MAX): stop and
//   re-rendezvous without consuming a restart;
// - the keep-alive finds a node of this round gone (c10d, etcd): stop the
//   workers and restart as for a failure, without waiting for their
//   collectives to time out;
// - every worker exited 0 or kExitStoppedAfterCheckpoint (75), some 75: a
//   signal reached them directly and they saved their work; return 75
//   without restarting them;
// - the job store is out of reach: the workers keep running while it comes
//   back within the keep-alive's dead-after (interval * max attempts, 15 s
//   by default: by then the other nodes have dropped this one); after that,
//   or when a request that cannot wait fails, the agent stops its workers
//   and returns 1 with a summary that names the store, says what its loss
//   means for the backend in use and which flag avoids it;
// - a handled signal arrived: forward it to the workers and give them
//   shutdown_timeout to exit (time to finish a step and checkpoint), then
//   SIGTERM (when the signal was another) and SIGKILL; return 128 + signal.
// No torch, no CUDA.
#pragma once

#include <atomic>
#include <map>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "launch/launch_config.h"
#include "rendezvous/rendezvous.h"

namespace dtrain {

class WorkerGroup;

class ElasticAgent {
 public:
  explicit ElasticAgent(LaunchConfig config);
  ~ElasticAgent();

  // Runs the job to its end; returns the launcher's exit code.
  int run();
  // Async-signal-safe: records the signal; run() acts on it within one
  // monitor interval.
  void requestStop(int signal) { stop_signal_.store(signal); }
  // True while this agent has workers to stop; when false, a signal may take
  // its default action at once (nothing to clean up, e.g. during rendezvous).
  bool hasWorkers() const { return has_workers_.load(); }

 private:
  enum class Outcome {
    kSucceeded,
    kFailedHere,
    kFailedElsewhere,
    kMembershipChanged,
    kStopped,
    kStoppedByWorkers,
    kPeerLost,  // the keep-alive found a node of this round gone: restart without waiting for a timeout
  };
  Outcome monitor(WorkerGroup& group, const RendezvousResult& round);
  std::vector<std::map<std::string, std::string>> workerEnvironments(const RendezvousResult& round,
                                                                      int restart_count,
                                                                      const std::string& master_port);
  // <log_dir_>/attempt_<restart_count>: the workers' logs and error files.
  std::string attemptLogDir(int restart_count) const;
  std::string masterPort(const RendezvousResult& round);
  // monitor(): true once the store has been out of reach for longer than
  // the keep-alive's dead-after (the first failure starts the clock).
  bool storeUnreachableFor(const std::string& error);
  // Stops the workers (if any), prints their failures and the store-loss
  // summary; returns the exit code.
  int storeLost(WorkerGroup* group, const std::string& error);

  LaunchConfig config_;
  std::string host_;
  std::string log_dir_;  // <log-dir>/<run-id>_<random>: this run's own folder
  std::unique_ptr<RendezvousHandler> rendezvous_;
  std::atomic<int> stop_signal_{0};
  std::atomic<bool> has_workers_{false};
  int port_retries_ = 0;
  int last_attempt_ = 0;
  std::string lost_nodes_;  // kPeerLost: which, for messages
  std::optional<std::chrono::steady_clock::time_point> store_failing_since;
};

}  // namespace dtrain
