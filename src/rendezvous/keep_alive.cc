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
  thread_ = std::thread([this] { run(); });
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
  auto it = seen_.find(node_id);
  return it != seen_.end() && it->second.last_seen - it->second.changed > deadAfter();
}

void KeepAlive::run() {
  const auto tick = std::max(options_.interval / 2, std::chrono::milliseconds(1));
  auto next_beat = Clock::now() + options_.interval;
  bool failing = false;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (wake_.wait_for(lock, tick, [this] { return stopping_; })) return;
    }
    try {
      if (!store_) store_ = reconnect_();
      if (Clock::now() >= next_beat) {
        store_->add(counterKey(options_.node_id), 1);
        next_beat = std::max(next_beat + options_.interval, Clock::now());
      }
      sample(*store_);
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

void KeepAlive::sample(Store& store) {
  std::vector<std::pair<std::string, int64_t>> counts;
  for (const auto& peer : peers_(store)) {
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
