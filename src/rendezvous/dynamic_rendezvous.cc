#include "rendezvous/dynamic_rendezvous.h"

#include <algorithm>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "rendezvous/node_roster.h"

namespace dtrain {
namespace {

std::string joinIds(const std::vector<std::string>& ids) {
  std::string out;
  for (const auto& id : ids) out += (out.empty() ? "" : ", ") + id;
  return out;
}

bool eraseId(std::vector<std::string>& ids, const std::string& id) {
  return std::erase(ids, id) > 0;
}

std::string c10dLabel(const RendezvousConfig& config) {
  return "c10d rendezvous '" + config.run_id + "' at " + endpointText(config.endpoint_host, config.endpoint_port);
}

}  // namespace

DynamicRendezvousHandler::DynamicRendezvousHandler(const RendezvousConfig& config, StoreRole role)
    : DynamicRendezvousHandler(config, c10dLabel(config),
                               std::make_unique<JobStoreEndpoint>(config, role, c10dLabel(config))) {}

DynamicRendezvousHandler::DynamicRendezvousHandler(const RendezvousConfig& config, std::string label,
                                                   std::unique_ptr<JobStoreLink> link)
    : config_(config),
      label_(std::move(label)),
      prefix_("/run/" + config.run_id + "/rdzv"),
      state_key_(prefix_ + "/state"),
      endpoint_(std::move(link)) {
  Store& store = *endpoint_->mainStore();
  store.compareSet(state_key_, "", RendezvousState{}.encode());  // the first agent creates it
  node_id_ = std::to_string(store.add(prefix_ + "/next_node_id", 1));
  store.set(prefix_ + "/node/" + node_id_,
            encodeNodeInfo({config_.local_world_size, endpoint_->localAddress()}));

  // The keep-alive gets connections of its own: a blocking get() of the
  // agent on the main one must not hold back a heartbeat.
  const auto keep_alive_timeout = config_.keep_alive_interval * config_.keep_alive_max_attempt;
  auto connect = [endpoint = endpoint_.get(), keep_alive_timeout](std::chrono::milliseconds limit) {
    std::shared_ptr<Store> store = endpoint->connectAnother(limit);
    store->setTimeout(keep_alive_timeout);
    return store;
  };
  KeepAlive::Options options;
  options.key_prefix = prefix_ + "/heartbeat";
  options.presence_prefix = prefix_ + "/present";
  options.node_id = node_id_;
  options.interval = config_.keep_alive_interval;
  options.max_attempt = config_.keep_alive_max_attempt;
  auto peers = [key = state_key_](Store& store) {
    RendezvousState state = RendezvousState::decode(store.get(key), key);
    std::vector<std::string> ids = state.participants;
    ids.insert(ids.end(), state.waiting.begin(), state.waiting.end());
    return ids;
  };
  keep_alive_ = std::make_unique<KeepAlive>(
      options, connect(config_.join_timeout),
      [connect, interval = config_.keep_alive_interval] { return connect(interval); }, peers);
  DTRAIN_LOG_DEBUG(label_ << ": this agent is node " << node_id_);
}

DynamicRendezvousHandler::~DynamicRendezvousHandler() = default;

DynamicRendezvousHandler::Snapshot DynamicRendezvousHandler::read(Store& store) const {
  Snapshot snapshot;
  snapshot.text = store.get(state_key_);
  snapshot.state = RendezvousState::decode(snapshot.text, state_key_);
  return snapshot;
}

bool DynamicRendezvousHandler::write(Store& store, const Snapshot& seen,
                                     const RendezvousState& desired) const {
  const std::string text = desired.encode();
  return store.compareSet(state_key_, seen.text, text) == text;
}

RendezvousResult DynamicRendezvousHandler::nextRendezvous() {
  const auto deadline = Clock::now() + config_.join_timeout;
  Store& store = *endpoint_->mainStore();
  window_round_ = -1;
  bool left = false;  // the round this agent was in, if any, is behind it
  while (true) {
    Snapshot seen = read(store);
    if (seen.state.closed) throw ConfigError(closedRunMessage(config_.run_id));
    RendezvousState desired = seen.state;
    std::vector<std::string> dropped;
    bool changed = dropDeadNodes(desired, dropped);
    changed |= left ? join(desired) : leave(desired);
    changed |= desired.advanceIfAllDeparted();
    if (changed) {
      if (write(store, seen, desired)) {
        left = true;
        if (!dropped.empty()) {
          DTRAIN_LOG_WARN(label_ << ": dropped node(s) " << joinIds(dropped)
                          << ": gone (its agent's connection to the store closed, or no heartbeat for "
                          << secondsText(keep_alive_->deadAfter()) << " s)");
        }
      }
      continue;  // won or lost the race: look again
    }
    if (!left) {
      left = true;  // nothing to leave
      continue;
    }
    if (desired.complete && desired.isActive(node_id_)) return finish(store, desired);
    if (Clock::now() >= deadline) timedOut(store, desired);
    std::this_thread::sleep_for(
        std::min<Clock::duration>(kRendezvousPollInterval, deadline - Clock::now()));
  }
}

bool DynamicRendezvousHandler::dropDeadNodes(RendezvousState& state,
                                             std::vector<std::string>& dropped) const {
  auto dead = [&](const std::string& id) { return id != node_id_ && keep_alive_->isDead(id); };
  for (const auto& id : state.participants) {
    if (dead(id) && !state.hasDeparted(id)) dropped.push_back(id);
  }
  if (state.complete) {
    // The roster of a complete round is frozen: the dead leave it like
    // anyone else, and the next round opens once all have left (without
    // expecting them back).
    state.departed.insert(state.departed.end(), dropped.begin(), dropped.end());
    state.lost.insert(state.lost.end(), dropped.begin(), dropped.end());
  } else {
    std::erase_if(state.participants, dead);
  }
  for (const auto& id : state.expected) {
    if (dead(id) && std::find(dropped.begin(), dropped.end(), id) == dropped.end()) dropped.push_back(id);
  }
  std::erase_if(state.expected, dead);
  for (const auto& id : state.waiting) {
    if (dead(id)) dropped.push_back(id);
  }
  std::erase_if(state.waiting, dead);
  return !dropped.empty();
}

bool DynamicRendezvousHandler::leave(RendezvousState& state) const {
  if (state.complete) {
    if (!state.isActive(node_id_)) return false;
    state.departed.push_back(node_id_);
    return true;
  }
  // A member of an open round from an earlier, failed call: join afresh.
  return eraseId(state.participants, node_id_);
}

bool DynamicRendezvousHandler::join(RendezvousState& state) {
  if (state.complete) {
    if (state.isActive(node_id_) || state.isWaiting(node_id_)) return false;
    state.waiting.push_back(node_id_);
    return true;
  }
  if (!state.isParticipant(node_id_)) {
    eraseId(state.waiting, node_id_);
    state.participants.push_back(node_id_);
    if (static_cast<int>(state.participants.size()) >= config_.max_nodes) state.complete = true;
    return true;
  }
  const int joined = static_cast<int>(state.participants.size());
  if (joined >= config_.max_nodes) {
    state.complete = true;
    return true;
  }
  if (joined < config_.min_nodes) {
    window_round_ = -1;  // a node was dropped: the window starts again at min
    return false;
  }
  // Everyone the last round had, less the dead, is back: nobody else is
  // known to be coming, so the last call would only delay the restart.
  const bool all_expected_back =
      !state.expected.empty() && std::all_of(state.expected.begin(), state.expected.end(),
                                             [&](const std::string& id) { return state.isParticipant(id); });
  const auto now = Clock::now();
  if (window_round_ != state.round) {
    window_round_ = state.round;
    window_start_ = now;
  }
  if (!all_expected_back && now - window_start_ < config_.last_call_timeout) return false;
  state.complete = true;
  return true;
}

RendezvousResult DynamicRendezvousHandler::finish(Store& store, const RendezvousState& state) const {
  std::vector<NodeInfo> roster;
  for (const auto& id : state.participants) {
    const std::string key = prefix_ + "/node/" + id;
    roster.push_back(decodeNodeInfo(store.get(key), key));
  }
  const auto me = std::find(state.participants.begin(), state.participants.end(), node_id_);
  RendezvousResult result = endpoint_->resultFor(config_.run_id, state.round);
  assignRanks(roster, static_cast<int>(me - state.participants.begin()), result);
  DTRAIN_LOG_DEBUG(label_ << ": round " << state.round << " complete with nodes "
                   << joinIds(state.participants) << "; node " << node_id_ << " is group rank "
                   << result.group_rank);
  return result;
}

void DynamicRendezvousHandler::timedOut(Store& store, const RendezvousState& state) const {
  // Best effort: a node that gives up must not count towards the round.
  try {
    for (int attempt = 0; attempt < 3; ++attempt) {
      Snapshot seen = read(store);
      RendezvousState desired = seen.state;
      bool changed = eraseId(desired.waiting, node_id_);
      if (!desired.complete) changed |= eraseId(desired.participants, node_id_);
      if (!changed || write(store, seen, desired)) break;
    }
  } catch (const Error& e) {
    DTRAIN_LOG_WARN(label_ << ": could not withdraw node " << node_id_ << ": " << e.message());
  }
  std::string why;
  if (state.complete) {
    why = std::to_string(state.waiting.size()) + " of " + std::to_string(config_.min_nodes) +
          " nodes joined; round " + std::to_string(state.round) + " is running with " +
          std::to_string(state.participants.size()) + " nodes and has not ended to admit them";
  } else {
    why = std::to_string(state.participants.size()) + " of " + std::to_string(config_.min_nodes) +
          " nodes joined round " + std::to_string(state.round);
  }
  throw TimeoutError(label_ + ": timed out after " + secondsText(config_.join_timeout) +
                     " s: " + why);
}

int DynamicRendezvousHandler::numNodesWaiting() {
  const RendezvousState state = read(*endpoint_->mainStore()).state;
  if (state.closed || !state.complete ||
      static_cast<int>(state.participants.size()) >= config_.max_nodes) {
    return 0;  // no room: a waiting node would not get in
  }
  return static_cast<int>(std::count_if(state.waiting.begin(), state.waiting.end(), [&](const auto& id) {
    return !state.isActive(id) && !keep_alive_->isDead(id);
  }));
}

std::vector<std::string> DynamicRendezvousHandler::lostNodes() {
  const RendezvousState state = read(*endpoint_->mainStore()).state;
  std::vector<std::string> lost;
  if (!state.complete || !state.isActive(node_id_)) return lost;
  for (const auto& id : state.participants) {
    if (id == node_id_ || !keep_alive_->isDead(id)) continue;
    std::string where = "node " + id;
    try {
      const std::string key = prefix_ + "/node/" + id;
      where += " at " + decodeNodeInfo(endpoint_->mainStore()->get(key), key).address;
    } catch (const Error&) {
      // Its address is only for the message.
    }
    lost.push_back(where);
  }
  return lost;
}

void DynamicRendezvousHandler::shutdown() {
  try {
    Store& store = *endpoint_->mainStore();
    while (true) {
      Snapshot seen = read(store);
      if (seen.state.closed) break;
      RendezvousState desired = seen.state;
      desired.closed = true;
      if (write(store, seen, desired)) break;
    }
  } catch (const Error& e) {
    // Called on the way out, often after a failure: that error matters more.
    DTRAIN_LOG_WARN(label_ << ": could not mark the run closed: " << e.message());
  }
  // This agent's own connections: the main one and the keep-alive's.
  endpoint_->waitForPeersToLeave(2, config_.close_timeout);
}

}  // namespace dtrain
