// Keep-alive (private to rendezvous/): which agents of a dynamic rendezvous
// are still alive, decided over the job store by one background thread per
// agent.
//
// Each agent adds 1 to its counter <key_prefix>/<node id> every `interval`
// and samples its peers' counters every half interval. A peer is dead when
// this agent's samples show its counter unchanged for longer than
// interval * max_attempt.
//
// Clock: only the observer's own steady clock is used, and only between
// its own samples: no node compares its time with another's, so clock skew
// between machines can neither kill a live node nor keep a dead one, and an
// observer whose thread stalls judges nobody by the stall (the verdict is
// "unchanged across samples spanning the threshold", not "no sample
// lately"). The cost: a peer first seen now is alive for at least the
// threshold. Sampling runs all the time, workers running or not, so a
// verdict is usually ready when a round needs it.
//
// Presence (faster, for agents that die on a live machine): with a
// presence_prefix, each agent also keeps <presence_prefix>/<node id> set
// with Store::setEphemeral(), which the store deletes when the agent's
// connection closes (its process exited or was killed). Peers check the
// presence keys every presence_interval (one CHECK of all of them while
// all are there): a listed peer whose key is absent in two samples in a row
// is dead at once, without waiting out the counter's threshold. (An agent
// sets its key before it joins any round, so a listed peer without one is
// gone, even if this agent never saw the key.) A
// machine that vanishes silently (power, partition) keeps its connection
// open on the server for a while, so the counters still decide then. An
// agent re-sets its key after every reconnect and every beat; a live
// agent's key is only absent after its connection failed, i.e. after it
// was out of touch for about its store's liveness timeout (10 s) anyway.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "store/store.h"

namespace dtrain {

class KeepAlive {
 public:
  struct Options {
    std::string key_prefix;  // counters are <key_prefix>/<node id>
    std::string node_id;     // this agent
    std::chrono::milliseconds interval{std::chrono::seconds(5)};
    int max_attempt = 3;
    std::string presence_prefix;  // "" = counters only
    std::chrono::milliseconds presence_interval{500};
  };
  // The peers to watch now (e.g. read from the rendezvous state); called
  // on the keep-alive thread before each sample, with its connection.
  using PeerList = std::function<std::vector<std::string>(Store&)>;
  // A fresh connection after a failed request (the old one is unusable).
  using Reconnect = std::function<std::shared_ptr<Store>()>;

  // Beats once on `store` before returning, so the counter exists before
  // this agent joins anything, then starts the thread.
  KeepAlive(Options options, std::shared_ptr<Store> store, Reconnect reconnect, PeerList peers);
  ~KeepAlive();
  KeepAlive(const KeepAlive&) = delete;
  KeepAlive& operator=(const KeepAlive&) = delete;

  // Stops beating and sampling (idempotent): peers will find this agent dead.
  void stop();
  // False for a peer not watched long enough to tell.
  bool isDead(const std::string& node_id) const;
  std::chrono::milliseconds deadAfter() const { return options_.interval * options_.max_attempt; }
  std::string counterKey(const std::string& node_id) const { return options_.key_prefix + "/" + node_id; }
  std::string presenceKey(const std::string& node_id) const { return options_.presence_prefix + "/" + node_id; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Sighting {
    int64_t count = 0;
    Clock::time_point changed;    // first sample that showed `count`
    Clock::time_point last_seen;  // latest sample that included this peer
  };
  struct Presence {
    int absent_samples = 0;  // consecutive samples without its presence key
  };

  void run();
  void sample(Store& store);
  void samplePresence(Store& store, const std::vector<std::string>& peers);
  void announce(Store& store);

  const Options options_;
  const Reconnect reconnect_;
  const PeerList peers_;
  std::shared_ptr<Store> store_;  // touched by the thread only, once it runs

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;                   // guarded by mutex_
  std::map<std::string, Sighting> seen_;    // guarded by mutex_
  std::map<std::string, Presence> presence_;  // guarded by mutex_
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace dtrain
