#include "rendezvous/static_rendezvous.h"

#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "rendezvous/node_roster.h"

namespace dtrain {
namespace {

void validateStaticConfig(const RendezvousConfig& config) {
  if (config.min_nodes != config.max_nodes) {
    throw ConfigError("static rendezvous needs a fixed number of nodes, got " +
                      std::to_string(config.min_nodes) + ":" + std::to_string(config.max_nodes) +
                      " (use --rdzv-backend c10d for an elastic MIN:MAX)");
  }
  if (config.node_rank < 0 || config.node_rank >= config.max_nodes) {
    throw ConfigError("static rendezvous needs a node rank in [0, " +
                      std::to_string(config.max_nodes) + "), got " +
                      std::to_string(config.node_rank) + " (--node-rank)");
  }
}

const RendezvousConfig& validated(const RendezvousConfig& config) {
  validateStaticConfig(config);
  return config;
}

}  // namespace

StaticRendezvousHandler::StaticRendezvousHandler(const RendezvousConfig& config, StoreRole role)
    : config_(validated(config)),
      label_("static rendezvous '" + config.run_id + "' at " +
             endpointText(config.endpoint_host, config.endpoint_port)),
      closed_key_("/run/" + config.run_id + "/rdzv/closed"),
      endpoint_(std::make_unique<JobStoreEndpoint>(config, role, label_)) {}

std::string StaticRendezvousHandler::nodeKey(int64_t generation, int node_rank) const {
  return "/run/" + config_.run_id + "/rdzv/static/" + std::to_string(generation) + "/node/" +
         std::to_string(node_rank);
}

RendezvousResult StaticRendezvousHandler::nextRendezvous() {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + config_.join_timeout;
  const int64_t generation = next_generation_++;
  Store& store = *endpoint_->client();
  if (store.check({closed_key_})) throw ConfigError(closedRunMessage(config_.run_id));

  store.set(nodeKey(generation, config_.node_rank),
            encodeNodeInfo({config_.local_world_size, endpoint_->localAddress()}));
  std::vector<std::string> keys;
  for (int rank = 0; rank < config_.max_nodes; ++rank) keys.push_back(nodeKey(generation, rank));
  // Polled rather than one wait(): a shutdown() must end the wait too.
  while (!store.check(keys)) {
    if (store.check({closed_key_})) throw ConfigError(closedRunMessage(config_.run_id));
    if (Clock::now() >= deadline) {
      std::string missing;
      int joined = 0;
      for (int rank = 0; rank < config_.max_nodes; ++rank) {
        if (store.check({keys[rank]})) {
          ++joined;
        } else {
          missing += (missing.empty() ? "" : ", ") + std::to_string(rank);
        }
      }
      throw TimeoutError(label_ + ": generation " + std::to_string(generation) +
                         " timed out after " + secondsText(config_.join_timeout) + " s: " +
                         std::to_string(joined) + " of " + std::to_string(config_.max_nodes) +
                         " nodes joined; missing node ranks: " + missing);
    }
    std::this_thread::sleep_for(
        std::min<Clock::duration>(kRendezvousPollInterval, deadline - Clock::now()));
  }

  std::vector<NodeInfo> roster;
  for (const auto& key : keys) roster.push_back(decodeNodeInfo(store.get(key), key));
  RendezvousResult result = endpoint_->resultFor(config_.run_id, generation);
  assignRanks(roster, config_.node_rank, result);
  return result;
}

void StaticRendezvousHandler::shutdown() {
  try {
    endpoint_->client()->set(closed_key_, "1");
  } catch (const Error& e) {
    // Called on the way out, often after a failure: that error matters more.
    DTRAIN_LOG_WARN(label_ << ": could not mark the run closed: " << e.message());
  }
  endpoint_->waitForPeersToLeave(1, config_.close_timeout);
}

}  // namespace dtrain
