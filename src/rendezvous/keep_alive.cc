#include "rendezvous/keep_alive.h"

#include <algorithm>

#include "common/error.h"
#include "common/log.h"

namespace dtrain {

KeepAlive::KeepAlive(Options options, std::shared_ptr<Store> store, Reconnect reconnect,
                     PeerList peers)
    : options_(std::move(options)),
      reconnect_(std::move(reconnect)),
      peers_(std::move(peers)),
      store_(std::move(store)) {
  store_->add(counterKey(options_.node_id), 1);
  announce(*store_);
  thread_ = std::thread([this] { run(); });
}

void KeepAlive::announce(Store& store) {
  if (!options_.presence_prefix.empty()) store.setEphemeral(presenceKey(options_.node_id), "1");
}

KeepAlive::~KeepAlive() { stop(); }

void KeepAlive::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool KeepAlive::isDead(const std::string& node_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto p = presence_.find(node_id); p != presence_.end() && p->second.absent_samples >= 2) {
    return true;
  }
  auto it = seen_.find(node_id);
  return it != seen_.end() && it->second.last_seen - it->second.changed > deadAfter();
}

void KeepAlive::run() {
  const auto counter_tick = std::max(options_.interval / 2, std::chrono::milliseconds(1));
  const auto tick = options_.presence_prefix.empty() ? counter_tick
                                                     : std::min(counter_tick, options_.presence_interval);
  auto next_beat = Clock::now() + options_.interval;
  auto next_sample = Clock::now() + counter_tick;
  bool failing = false;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (wake_.wait_for(lock, tick, [this] { return stopping_; })) return;
    }
    try {
      if (!store_) {
        store_ = reconnect_();
        announce(*store_);  // the old connection's close deleted the key
      }
      if (Clock::now() >= next_beat) {
        store_->add(counterKey(options_.node_id), 1);
        announce(*store_);
        next_beat = std::max(next_beat + options_.interval, Clock::now());
      }
      if (Clock::now() >= next_sample) {
        sample(*store_);
        next_sample = std::max(next_sample + counter_tick, Clock::now());
      } else if (!options_.presence_prefix.empty()) {
        samplePresence(*store_, peers_(*store_));
      }
      if (failing) DTRAIN_LOG_INFO("keep-alive of node " << options_.node_id << " recovered");
      failing = false;
    } catch (const std::exception& e) {
      // The store may be briefly unreachable; peers decide whether the
      // silence is long enough to matter.
      if (!failing) {
        DTRAIN_LOG_WARN("keep-alive of node " << options_.node_id << " failed: " << e.what()
                        << "; retrying");
      }
      failing = true;
      store_.reset();
    }
  }
}

void KeepAlive::samplePresence(Store& store, const std::vector<std::string>& peers) {
  if (options_.presence_prefix.empty()) return;
  std::vector<std::string> others;
  for (const auto& peer : peers) {
    if (peer != options_.node_id) others.push_back(peer);
  }
  std::vector<std::string> keys;
  for (const auto& peer : others) keys.push_back(presenceKey(peer));
  // One request while everyone is there; one per peer only when someone is not.
  const bool all_present = keys.empty() || store.check(keys);
  std::map<std::string, bool> present;
  for (const auto& peer : others) present[peer] = all_present || store.check({presenceKey(peer)});
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, Presence> updated;
  for (const auto& [peer, here] : present) {
    Presence p = presence_.count(peer) ? presence_[peer] : Presence{};
    if (here) {
      p.absent_samples = 0;
    } else {
      ++p.absent_samples;
    }
    updated[peer] = p;
  }
  presence_ = std::move(updated);  // peers no longer listed are forgotten
}

void KeepAlive::sample(Store& store) {
  std::vector<std::pair<std::string, int64_t>> counts;
  const std::vector<std::string> peers = peers_(store);
  samplePresence(store, peers);
  for (const auto& peer : peers) {
    if (peer != options_.node_id) counts.emplace_back(peer, store.add(counterKey(peer), 0));
  }
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, Sighting> seen;
  for (const auto& [peer, count] : counts) {
    auto it = seen_.find(peer);
    Sighting sighting = it != seen_.end() ? it->second : Sighting{count, now, now};
    if (sighting.count != count) sighting = Sighting{count, now, now};
    sighting.last_seen = now;
    seen[peer] = sighting;
  }
  seen_ = std::move(seen);  // peers no longer listed are forgotten
}

}  // namespace dtrain
