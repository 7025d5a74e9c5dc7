// ElasticAgent: what `dtrain launch` runs on each node (launch/).
//
// run() is a state machine; each state is one function that returns the next:
//
//   kRendezvous   -> kStartWorkers
//   kStartWorkers -> kMonitor
//   kMonitor      -> kExitBarrier | kFailure | kRendezvous (a node joins) | kDone (a signal)
//   kExitBarrier  -> kDone | kFailure (a node failed meanwhile)
//   kFailure      -> kReport
//   kReport       -> kRendezvous (restarts left) | kDone (none left)
//   from kMonitor on, or kRendezvous: kDone when the job store is lost
//
// - kRendezvous: join the next round (rendezvous/) and read the global
//   restart count from the store. The store out of reach here: report its
//   loss (see below) and stop.
// - kStartWorkers: spawn this node's workers for the round, their logs in
//   <log_dir>/attempt_<restart count>. A worker that cannot be started (a
//   ConfigError: no such program) fails the generation for every node and
//   leaves run() with that error: no restart can help it.
// - kMonitor: watch the workers (every few ms), the signals and the store
//   (every monitor_interval) until one of them decides:
//   - all workers exited 0: kExitBarrier;
//   - every worker exited 0 or kExitStoppedAfterCheckpoint (75), some 75: a
//     signal reached them directly and they saved their work; return 75
//     without restarting them;
//   - another node is waiting to join (MIN < nodes < MAX): stop the workers
//     and go back to kRendezvous without consuming a restart;
//   - a worker failed, here or on another node, or the keep-alive found a
//     node of this round gone (c10d, etcd): kFailure;
//   - a handled signal arrived: forward it to the workers and give them
//     shutdown_timeout to exit (time to finish a step and checkpoint), then
//     SIGTERM (when the signal was another) and SIGKILL; return 128 + signal.
// - kExitBarrier: wait until every node's group is done (bounded by
//   exit_barrier_timeout) before anyone tears the store down, then return 0;
//   a failure elsewhere meanwhile: kFailure.
// - kFailure: gang semantics: the first node to see the generation fail
//   marks it failed in the store and counts one restart (global, in the
//   store; a MASTER_PORT this agent chose and found taken is retried on
//   another port without one), and every agent stops its workers: SIGTERM,
//   and SIGKILL 3 s later, since workers of a failed gang can finish
//   nothing (torchrun waits 30 s). Then kReport.
// - kReport: print the root-cause summary of this node's failures; while
//   restarts remain go back to kRendezvous, else give up and return the
//   failure's exit code (1 for a lost node or a failure elsewhere).
// - kDone: run() returns the exit code the last state set.
// From kMonitor on, the job store may be lost: the workers keep running
// while it comes back within the keep-alive's dead-after (interval * max
// attempts, 15 s by default: by then the other nodes have dropped this one);
// after that, or when a request that cannot wait fails, the agent stops its
// workers and returns 1 with a summary that names the store, says what its
// loss means for the backend in use and which flag avoids it. The store
// server this agent hosts failing leaves run() with its IoError.
// No torch, no CUDA.
#pragma once

#include <atomic>
#include <map>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "launch/launch_config.h"
#include "launch/worker_group.h"
#include "rendezvous/rendezvous.h"

namespace dtrain {

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
  // run()'s states (see above).
  enum class State { kRendezvous, kStartWorkers, kMonitor, kExitBarrier, kFailure, kReport, kDone };
  // What monitor() saw end the workers' run.
  enum class Outcome {
    kSucceeded,
    kFailedHere,
    kFailedElsewhere,
    kMembershipChanged,
    kStopped,
    kStoppedByWorkers,
    kPeerLost,  // the keep-alive found a node of this round gone: restart without waiting for a timeout
  };
  // One attempt: the round, the workers started for it, and how it ended.
  struct Attempt {
    RendezvousResult round;
    int restart_count = 0;
    std::string master_port;
    std::unique_ptr<WorkerGroup> group;
    Outcome outcome = Outcome::kSucceeded;
    std::vector<WorkerFailure> failures;
    int restarts_after = 0;  // the global restart count once this failure is counted
  };

  State step(State state);
  State rendezvousState();
  State startWorkersState();
  State monitorState();
  State exitBarrierState();
  State failureState();
  State reportState();
  // Records the launcher's exit code; returns kDone.
  State finish(int exit_code);
  // kFailure: counts this generation's failure once for all nodes; returns
  // the restart count after it.
  int countFailure();

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
  std::string restart_key_;  // the global restart count in the store
  std::string me_;           // host:pid, what this agent writes as the failed one
  Attempt attempt_;
  int exit_code_ = 0;
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
