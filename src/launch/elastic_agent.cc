#include "launch/elastic_agent.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/host.h"
#include "common/process.h"
#include "common/error.h"
#include "common/log.h"
#include "common/settings.h"
#include "common/socket.h"
#include "launch/worker_group.h"
#include "store/store.h"


namespace dtrain {
namespace {

constexpr int kMaxPortRetries = 3;
// How long the workers of a failed group get between SIGTERM and SIGKILL.
constexpr std::chrono::milliseconds kFailedGroupGrace{3000};

// PyTorch's rank 0 binds MASTER_PORT after we let go of it, so another
// process can take it in between: the agent then retries with a new port.
std::string freePort() { return std::to_string(freeTcpPort(/*loopback_only=*/false, "MASTER_PORT")); }

bool mentionsPortCollision(const WorkerFailure& failure) {
  for (const auto& line : failure.stderr_tail) {
    std::string lower = line;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    if (lower.find("address already in use") != std::string::npos || lower.find("eaddrinuse") != std::string::npos) {
      return true;
    }
  }
  return false;
}

// The agent's own store server stopped serving (see monitor()).
class StoreServerFailed : public IoError {
 public:
  using IoError::IoError;
};

std::string secondsSince(std::chrono::steady_clock::time_point since) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since);
  return std::to_string(ms.count() / 1000) + "." + std::to_string(ms.count() % 1000 / 100);
}

// torchrun's layout: a folder of its own for every run,
// <log-dir>/<run-id>_<random>/, so that a run never reads (or quotes in its
// failure summary) the error files an earlier run left in the same --log-dir.
std::string makeRunLogDirectory(const std::string& base, const std::string& run_id) {
  std::error_code ec;
  std::filesystem::create_directories(base, ec);
  if (ec) throw IoError("could not create --log-dir " + base + ": " + ec.message());
  std::string name = run_id;
  std::replace(name.begin(), name.end(), '/', '_');
  std::string pattern = base + "/" + name + "_XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw errnoError("mkdtemp", errno, "cannot create the run's log folder " + pattern + " (--log-dir)");
  }
  return pattern;
}

void sleepFor(std::chrono::milliseconds duration, const std::atomic<int>& stop) {
  auto until = std::chrono::steady_clock::now() + duration;
  while (stop.load() == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(duration, std::chrono::milliseconds(5)));
  }
}

}  // namespace

ElasticAgent::ElasticAgent(LaunchConfig config) : config_(std::move(config)), host_(hostName()) {
  const std::string base = config_.log_dir.empty() ? makeTemporaryDirectory("dtrain_launch") : config_.log_dir;
  log_dir_ = makeRunLogDirectory(base, config_.rendezvous.run_id);
  DTRAIN_LOG_INFO("log directory: " << log_dir_);
}

ElasticAgent::~ElasticAgent() = default;

std::string ElasticAgent::attemptLogDir(int restart_count) const {
  return log_dir_ + "/attempt_" + std::to_string(restart_count);
}

std::string ElasticAgent::masterPort(const RendezvousResult& round) {
  if (config_.worker_master_port > 0) return std::to_string(config_.worker_master_port);
  if (round.group_rank == 0) {
    std::string port = freePort();
    round.store->set("agent/master_port", port);
    return port;
  }
  return round.store->get("agent/master_port");
}

std::vector<std::map<std::string, std::string>> ElasticAgent::workerEnvironments(
    const RendezvousResult& round, int restart_count, const std::string& master_port) {
  std::vector<std::map<std::string, std::string>> envs;
  const auto base = currentEnvironment();
  const int nproc = config_.nproc_per_node;
  for (int local = 0; local < nproc; ++local) {
    auto env = base;
    const int rank = round.rank_offset + local;
    env["RANK"] = std::to_string(rank);
    env["LOCAL_RANK"] = std::to_string(local);
    env["GROUP_RANK"] = std::to_string(round.group_rank);
    env["ROLE_RANK"] = std::to_string(rank);
    env["ROLE_NAME"] = config_.role;
    env["LOCAL_WORLD_SIZE"] = std::to_string(nproc);
    env["WORLD_SIZE"] = std::to_string(round.world_size);
    env["GROUP_WORLD_SIZE"] = std::to_string(round.group_world_size);
    env["ROLE_WORLD_SIZE"] = std::to_string(round.world_size);
    env["MASTER_ADDR"] = round.master_addr;
    env["MASTER_PORT"] = master_port;
    env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(restart_count);
    env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(config_.max_restarts);
    env["TORCHELASTIC_RUN_ID"] = config_.rendezvous.run_id;
    // Our store does not speak PyTorch's TCPStore protocol: rank 0 of a
    // PyTorch job hosts its own store at MASTER_PORT.
    env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
    // As torchrun: a failed NCCL collective aborts the worker instead of
    // hanging it, unless the user chose otherwise.
    if (base.count("TORCH_NCCL_ASYNC_ERROR_HANDLING") == 0) env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1";
    const std::string rank_dir = attemptLogDir(restart_count) + "/" + std::to_string(local);
    std::error_code ec;
    std::filesystem::create_directories(rank_dir, ec);
    env["TORCHELASTIC_ERROR_FILE"] = rank_dir + "/error.json";
    if (config_.default_omp_num_threads) env["OMP_NUM_THREADS"] = "1";
    env["DTRAIN_STORE_ADDR"] =
        round.store_url.empty() ? round.store_host + ":" + std::to_string(round.store_port) : round.store_url;
    env["DTRAIN_STORE_PREFIX"] = "/run/" + config_.rendezvous.run_id + "/gen/" +
                                 std::to_string(round.generation) + "/workers";
    envs.push_back(std::move(env));
  }
  return envs;
}

ElasticAgent::Outcome ElasticAgent::monitor(WorkerGroup& group, const RendezvousResult& round) {
  // Local workers are polled every few milliseconds (a waitpid each, no
  // syscall beyond that), so a failure is acted on at once; the store, which
  // other nodes share, is asked only every monitor_interval.
  constexpr auto kLocalPoll = std::chrono::milliseconds(5);
  auto next_store_check = std::chrono::steady_clock::now() + config_.monitor_interval;
  while (true) {
    sleepFor(kLocalPoll, stop_signal_);
    if (int sig = stop_signal_.load()) {
      DTRAIN_LOG_WARN("received " << signalName(sig) << "; forwarding it to the workers, which have "
                      << config_.shutdown_timeout.count() / 1000.0 << " s (--shutdown-timeout) to exit"
                      << (sig == SIGTERM ? "" : " before SIGTERM"));
      group.stop(sig);
      return Outcome::kStopped;
    }
    switch (group.poll()) {
      case GroupState::kFailed: return Outcome::kFailedHere;
      case GroupState::kSucceeded: return Outcome::kSucceeded;
      case GroupState::kStopped: return Outcome::kStoppedByWorkers;
      case GroupState::kRunning: break;
    }
    if (std::chrono::steady_clock::now() < next_store_check) continue;
    next_store_check = std::chrono::steady_clock::now() + config_.monitor_interval;
    if (const std::string why = rendezvous_->storeServerFailure(); !why.empty()) {
      // The job's store is gone with it: no restart can rendezvous again.
      DTRAIN_LOG_ERROR("the job store this agent hosts failed; stopping the workers: " << why);
      group.stop();
      throw StoreServerFailed(why);
    }
    // The workers may well be fine while the store is briefly out of reach
    // (a partition that heals): they keep running for the keep-alive's
    // dead-after, after which the other nodes have dropped this one anyway.
    try {
      StoreDeadlineScope bounded(std::max<std::chrono::milliseconds>(config_.monitor_interval, std::chrono::seconds(2)));
      const bool failed_elsewhere = round.store->check({"agent/failed"});
      const bool someone_waiting = !failed_elsewhere && rendezvous_->numNodesWaiting() > 0;
      const std::vector<std::string> lost =
          failed_elsewhere || someone_waiting ? std::vector<std::string>{} : rendezvous_->lostNodes();
      if (store_failing_since) {
        DTRAIN_LOG_INFO("the job store answers again after "
                        << secondsSince(*store_failing_since) << " s");
        store_failing_since.reset();
      }
      if (failed_elsewhere) return Outcome::kFailedElsewhere;
      if (someone_waiting) return Outcome::kMembershipChanged;
      if (!lost.empty()) {
        // The workers would only find out when a collective times out
        // (--timeout, 10 minutes by default): restart them now.
        lost_nodes_.clear();
        for (const auto& node : lost) lost_nodes_ += (lost_nodes_.empty() ? "" : ", ") + node;
        DTRAIN_LOG_WARN("lost " << lost_nodes_ << " of this round (its agent's connection to the store closed, "
                        "or no heartbeat for " << (config_.rendezvous.keep_alive_interval *
                                                   config_.rendezvous.keep_alive_max_attempt).count() / 1000.0
                        << " s); stopping the workers and restarting the group");
        return Outcome::kPeerLost;
      }
    } catch (const IoError& e) {
      if (storeUnreachableFor(e.message())) throw;
    } catch (const TimeoutError& e) {
      if (storeUnreachableFor(e.message())) throw;
    }
  }
}

bool ElasticAgent::storeUnreachableFor(const std::string& error) {
  const auto grace = config_.rendezvous.keep_alive_interval * config_.rendezvous.keep_alive_max_attempt;
  const auto now = std::chrono::steady_clock::now();
  if (!store_failing_since) {
    store_failing_since = now;
    DTRAIN_LOG_WARN("cannot reach the job store: " << error << "; the workers keep running, and this agent "
                    "gives up if the store stays out of reach for " << grace.count() / 1000.0 << " s");
    return false;
  }
  return now - *store_failing_since >= grace;
}

int ElasticAgent::storeLost(WorkerGroup* group, const std::string& error) {
  std::vector<WorkerFailure> failures;
  if (group) {
    failures = group->failures();
    group->stop();
  }
  if (!failures.empty()) std::fputs(formatFailureSummary(failures, host_, last_attempt_).c_str(), stderr);
  const RendezvousConfig& rdzv = config_.rendezvous;
  const bool etcd = rdzv.backend == RendezvousBackend::kEtcd;
  std::string endpoint = rdzv.endpoint_host + ":" + std::to_string(rdzv.endpoint_port);
  if (etcd) {
    endpoint.clear();
    for (const auto& member : rdzv.etcd_endpoints) endpoint += (endpoint.empty() ? "" : ",") + member;
  }
  std::string summary = "dtrain launch: lost the job store at " + endpoint + ": " + error + "\n";
  if (etcd) {
    summary += "  Every member of the etcd cluster (" + endpoint +
               ") is out of reach from this node: the cluster lost its quorum, or this node is cut off "
               "from the network.\n";
  } else {
    summary += "  With --rdzv-backend " + rendezvousBackendName(rdzv.backend) + " the job's state lives in the agent on " +
               rdzv.endpoint_host +
               " that hosts the store: once that node is gone (or cut off from this one) no restart can "
               "rendezvous again, whatever restarts are left (--max-restarts " +
               std::to_string(config_.max_restarts) + ").\n"
               "  To survive the loss of any one node, that one included, run the job with "
               "--rdzv-backend etcd --rdzv-endpoint <the members of an etcd cluster>.\n";
  }
  std::fputs(summary.c_str(), stderr);
  return 1;
}

int ElasticAgent::run() {
  rendezvous_ = createRendezvousHandler(config_.rendezvous);
  restart_key_ = "/run/" + config_.rendezvous.run_id + "/restart_count";
  me_ = host_ + ":" + std::to_string(::getpid());
  if (config_.default_omp_num_threads) {
    DTRAIN_LOG_WARN("setting OMP_NUM_THREADS=1 for each of the " << config_.nproc_per_node << " workers, as "
                    "torchrun does when a node runs more than one and the variable is unset, so that they do "
                    "not overload the machine; set OMP_NUM_THREADS to tune it");
  }
  State state = State::kRendezvous;
  while (state != State::kDone) state = step(state);
  return exit_code_;
}

ElasticAgent::State ElasticAgent::step(State state) {
  if (state == State::kRendezvous) return rendezvousState();
  if (state == State::kStartWorkers) return startWorkersState();
  State next = State::kDone;
  try {
    switch (state) {
      case State::kMonitor: next = monitorState(); break;
      case State::kExitBarrier: next = exitBarrierState(); break;
      case State::kFailure: next = failureState(); break;
      case State::kReport: next = reportState(); break;
      default: break;
    }
  } catch (const StoreServerFailed&) {
    throw;  // this agent's own store server failed: its message says why
  } catch (const IoError& e) {
    next = finish(storeLost(attempt_.group.get(), e.message()));
  } catch (const TimeoutError& e) {
    next = finish(storeLost(attempt_.group.get(), e.message()));
  }
  if (next == State::kRendezvous || next == State::kDone) {
    // The attempt is over: its workers are stopped (or finished).
    has_workers_.store(false);
    attempt_.group.reset();
  }
  return next;
}

ElasticAgent::State ElasticAgent::finish(int exit_code) {
  exit_code_ = exit_code;
  return State::kDone;
}

ElasticAgent::State ElasticAgent::rendezvousState() {
  attempt_ = Attempt{};
  try {
    attempt_.round = rendezvous_->nextRendezvous();
    attempt_.restart_count = static_cast<int>(attempt_.round.root_store->add(restart_key_, 0));
  } catch (const IoError& e) {
    return finish(storeLost(nullptr, e.message()));  // between groups: the store host went away
  }
  const RendezvousResult& round = attempt_.round;
  DTRAIN_LOG_INFO(rendezvous_->describe() << ": generation " << round.generation << ", node "
                  << round.group_rank << " of " << round.group_world_size << ", ranks "
                  << round.rank_offset << ".." << round.rank_offset + config_.nproc_per_node - 1
                  << " of " << round.world_size << ", restart " << attempt_.restart_count << "/"
                  << config_.max_restarts);
  return State::kStartWorkers;
}

ElasticAgent::State ElasticAgent::startWorkersState() {
  WorkerSpec spec;
  spec.argv = config_.worker_argv;
  spec.role = config_.role;
  spec.host = host_;
  spec.log_dir = log_dir_;
  // Named by the restart count, as torchrun's attempt_<n>; a round that
  // consumed no restart (a node joined, a port was taken) starts afresh in
  // the same folder, so no error file of the last round is read as this one's.
  spec.attempt = attempt_.restart_count;
  std::error_code ec;
  std::filesystem::remove_all(attemptLogDir(attempt_.restart_count), ec);
  spec.redirects = config_.redirects;
  spec.tees = config_.tees;
  spec.local_ranks_filter = config_.local_ranks_filter;
  spec.line_prefix_template = config_.log_line_prefix_template;
  spec.shutdown_timeout = config_.shutdown_timeout;
  attempt_.master_port = masterPort(attempt_.round);
  attempt_.group = std::make_unique<WorkerGroup>(
      spec, workerEnvironments(attempt_.round, attempt_.restart_count, attempt_.master_port));
  has_workers_.store(true);
  try {
    attempt_.group->start();
  } catch (const ConfigError&) {
    // No restart can start a program that is not there: fail every node.
    attempt_.round.store->compareSet("agent/failed", "", me_);
    attempt_.round.store->set("agent/failed_restart_count", std::to_string(config_.max_restarts + 1));
    rendezvous_->shutdown();
    attempt_.group.reset();
    throw;
  }
  return State::kMonitor;
}

ElasticAgent::State ElasticAgent::monitorState() {
  last_attempt_ = attempt_.restart_count;
  attempt_.outcome = monitor(*attempt_.group, attempt_.round);
  switch (attempt_.outcome) {
    case Outcome::kStopped: return finish(128 + stop_signal_.load());
    case Outcome::kStoppedByWorkers:
      // A signal reached the workers without this agent (Slurm signals
      // every process of a step): they saved their work; run again, not
      // restarted here.
      DTRAIN_LOG_WARN("the workers stopped after writing a checkpoint (exit " << kExitStoppedAfterCheckpoint
                      << "); not restarting them");
      for (const std::string& reason : attempt_.group->stopReasons()) {
        DTRAIN_LOG_WARN("the workers stopped because " << reason);
      }
      rendezvous_->shutdown();
      return finish(kExitStoppedAfterCheckpoint);
    case Outcome::kSucceeded: return State::kExitBarrier;
    case Outcome::kMembershipChanged:
      DTRAIN_LOG_INFO("a node is waiting to join; re-rendezvous (no restart consumed)");
      attempt_.group->stop();
      return State::kRendezvous;
    case Outcome::kFailedHere:
    case Outcome::kFailedElsewhere:
    case Outcome::kPeerLost: break;
  }
  return State::kFailure;
}

ElasticAgent::State ElasticAgent::exitBarrierState() {
  Store& store = *attempt_.round.store;
  const std::string count_key = "agent/exit_barrier/count";
  const std::string done_key = "agent/exit_barrier/done";
  if (store.add(count_key, 1) == attempt_.round.group_world_size) store.set(done_key, "1");
  auto deadline = std::chrono::steady_clock::now() + config_.exit_barrier_timeout;
  while (!store.check({done_key}) && !store.check({"agent/failed"})) {
    if (std::chrono::steady_clock::now() > deadline) {
      DTRAIN_LOG_WARN("exit barrier timed out after " << config_.exit_barrier_timeout.count()
                      << " ms; leaving anyway");
      break;
    }
    sleepFor(std::chrono::milliseconds(20), stop_signal_);
  }
  if (!store.check({"agent/failed"})) {
    rendezvous_->shutdown();
    return finish(0);
  }
  attempt_.outcome = Outcome::kFailedElsewhere;
  return State::kFailure;
}

ElasticAgent::State ElasticAgent::failureState() {
  attempt_.failures = attempt_.group->failures();
  // The gang has failed (here, elsewhere, or a node is gone): the workers
  // left are blocked in collectives with a dead or failed peer and can
  // neither finish a step nor checkpoint it, so they get a short grace
  // rather than --shutdown-timeout.
  attempt_.group->stop(SIGTERM, kFailedGroupGrace);
  const bool seen_here = attempt_.outcome == Outcome::kFailedHere || attempt_.outcome == Outcome::kPeerLost;
  if (seen_here && attempt_.round.store->compareSet("agent/failed", "", me_) == me_) {
    attempt_.restarts_after = countFailure();
  } else {
    attempt_.restarts_after = static_cast<int>(
        parseInt64(attempt_.round.store->get("agent/failed_restart_count"), "failed_restart_count"));
  }
  return State::kReport;
}

int ElasticAgent::countFailure() {
  // First to see this generation fail: count it, once for all nodes. Only
  // a port this agent chose is replaced: one the user gave (--master-port)
  // is the one their firewall opens.
  const std::vector<WorkerFailure>& failures = attempt_.failures;
  const bool port_collision = !failures.empty() && mentionsPortCollision(failures.front());
  if (port_collision && config_.worker_master_port > 0) {
    DTRAIN_LOG_WARN("MASTER_PORT " << config_.worker_master_port << " (--master-port) is in use on this "
                    "host; the workers keep the port they were given: free it or choose another");
  }
  int restarts_after = 0;
  if (port_collision && config_.worker_master_port == 0 && port_retries_ < kMaxPortRetries) {
    ++port_retries_;
    DTRAIN_LOG_WARN("MASTER_PORT " << attempt_.master_port << ", which this agent chose, "
                    "was taken before the workers bound it; retrying on another port (no restart used, "
                    << port_retries_ << "/" << kMaxPortRetries << ")");
    restarts_after = attempt_.restart_count;
  } else {
    restarts_after = static_cast<int>(attempt_.round.root_store->add(restart_key_, 1));
  }
  attempt_.round.store->set("agent/failed_restart_count", std::to_string(restarts_after));
  return restarts_after;
}

ElasticAgent::State ElasticAgent::reportState() {
  const std::vector<WorkerFailure>& failures = attempt_.failures;
  const int restart_count = attempt_.restart_count;
  if (!failures.empty()) {
    std::fputs(formatFailureSummary(failures, host_, restart_count).c_str(), stderr);
    std::fputs(missingModuleHint(failures.front(), config_.python_path, config_.python_origin).c_str(), stderr);
    std::fprintf(stderr, "Logs: %s/\n", attemptLogDir(restart_count).c_str());
    std::ofstream(log_dir_ + "/failure.json") << failureSummaryJson(failures, host_, restart_count);
  }
  if (attempt_.restarts_after <= config_.max_restarts) {
    DTRAIN_LOG_WARN("worker group failed; restarting (" << attempt_.restarts_after << "/" << config_.max_restarts
                    << ")");
    return State::kRendezvous;
  }
  rendezvous_->shutdown();
  if (!failures.empty()) return finish(launcherExitCode(failures.front()));
  if (attempt_.outcome == Outcome::kPeerLost) {
    std::fprintf(stderr, "dtrain launch: lost %s and no restarts are left (--max-restarts %d)\n",
                 lost_nodes_.c_str(), config_.max_restarts);
    return finish(1);
  }
  std::fprintf(stderr, "dtrain launch: the worker group failed on another node (%s) and no restarts "
                       "are left (--max-restarts %d)\n",
               attempt_.round.store->get("agent/failed").c_str(), config_.max_restarts);
  return finish(1);
}

}  // namespace dtrain
