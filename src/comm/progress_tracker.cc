#include "comm/progress_tracker.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "common/log.h"
#include "store/store.h"

namespace dtrain {
namespace {

struct ProgressRecord {
  uint64_t started = 0;
  uint64_t completed = 0;
  uint64_t heartbeat = 0;
  bool closed = false;  // the tracker was destroyed (communicator closed)
  std::string host;     // "" when the record does not say
  std::string address;
};

constexpr const char* kClosedMark = "closed";
constexpr const char* kUnknown = "-";  // a missing host or address in a record

std::string tokenOrUnknown(std::string text) {
  std::replace_if(text.begin(), text.end(), [](unsigned char c) { return std::isspace(c) != 0; }, '_');
  return text.empty() ? kUnknown : text;
}

// "<started> <completed> <heartbeat>[ <host> <address>][ closed]"
std::optional<ProgressRecord> parseRecord(const std::string& text) {
  std::istringstream in(text);
  ProgressRecord record;
  if (!(in >> record.started >> record.completed >> record.heartbeat)) return std::nullopt;
  std::vector<std::string> rest;
  for (std::string word; in >> word;) rest.push_back(word);
  if (!rest.empty() && rest.back() == kClosedMark) {
    record.closed = true;
    rest.pop_back();
  }
  if (rest.size() == 2) {
    record.host = rest[0] == kUnknown ? "" : rest[0];
    record.address = rest[1] == kUnknown ? "" : rest[1];
  }
  return record;
}

std::string joinParts(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (const auto& part : parts) out += (out.empty() ? "" : separator) + part;
  return out;
}

// "(last started #41)" when the laggards agree, else one entry per rank.
std::string lastStartedNote(const std::vector<int>& ranks,
                            const std::map<int, ProgressRecord>& records) {
  std::set<uint64_t> distinct;
  for (int r : ranks) distinct.insert(records.at(r).started);
  auto seqText = [](uint64_t seq) { return seq == 0 ? std::string("none") : "#" + std::to_string(seq); };
  if (distinct.size() == 1) return "(last started " + seqText(*distinct.begin()) + ")";
  std::string note = "(last started:";
  for (size_t i = 0; i < ranks.size(); ++i) {
    note += (i == 0 ? " rank " : ", rank ") + std::to_string(ranks[i]) + " " +
            seqText(records.at(ranks[i]).started);
  }
  return note + ")";
}

// Where a rank runs, as its latest record (else the roster) says:
// " on node1 (10.0.0.2)", or "" when nothing says.
using PlaceOf = std::function<std::string(int rank)>;

// "ranks 1, 3 on node1 (10.0.0.2), rank 4 on node2 (10.0.0.3)": ranks grouped by where they run.
std::string rankNames(const std::vector<int>& ranks, const PlaceOf& place_of) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;  // place suffix -> ranks
  for (int r : ranks) {
    const std::string place = place_of(r);
    auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == place; });
    if (group == groups.end()) group = groups.insert(groups.end(), {place, {}});
    group->second.push_back(r);
  }
  std::vector<std::string> texts;
  for (const auto& [place, members] : groups) {
    std::string text = members.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < members.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(members[i]);
    texts.push_back(text + place);
  }
  return joinParts(texts, ", ");
}

// The first few of `ranks` by name, and how many more: a cut-off host may
// have lost hundreds.
std::string lostRanksText(std::vector<int> ranks, const PlaceOf& place_of) {
  constexpr size_t kListed = 8;
  const size_t more = ranks.size() > kListed ? ranks.size() - kListed : 0;
  ranks.resize(std::min(ranks.size(), kListed));
  return rankNames(ranks, place_of) + (more ? " and " + std::to_string(more) + " more" : "");
}

// A rank's record; nullopt when it has none, or one that does not parse.
std::optional<ProgressRecord> readRecord(Store& store, const std::string& key) {
  if (!store.check({key})) return std::nullopt;
  return parseRecord(store.get(key));
}

// What the ranks' records say while a diagnosis watches them.
struct ProgressSnapshot {
  std::map<int, ProgressRecord> latest;  // the last record read of each rank that has one
  std::set<int> silent;                  // ranks not seen publishing (again)
};

// Reads every rank's record (keys[rank]), then again every `interval` for
// `window`, until each rank but `self` has published again (a heartbeat or
// its closing record). Fills `snapshot` as it goes, so that what was read
// before the store failed still names the ranks' hosts.
void watchRecords(Store& store, const std::vector<std::string>& keys, int self, Milliseconds interval,
                  Milliseconds window, ProgressSnapshot& snapshot) {
  const auto deadline = std::chrono::steady_clock::now() + window;
  std::map<int, ProgressRecord> first;
  for (int r = 0; r < static_cast<int>(keys.size()); ++r) {
    snapshot.silent.insert(r);
    if (auto record = readRecord(store, keys[r])) first[r] = snapshot.latest[r] = *record;
  }
  snapshot.silent.erase(self);  // this thread is diagnosing, so this rank is alive
  while (!snapshot.silent.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(interval);
    for (auto it = snapshot.silent.begin(); it != snapshot.silent.end();) {
      const int r = *it;
      const std::optional<ProgressRecord> record = readRecord(store, keys[r]);
      const bool published_again =
          record && (!first.count(r) || record->heartbeat != first[r].heartbeat || record->closed);
      if (record) snapshot.latest[r] = *record;
      it = published_again ? snapshot.silent.erase(it) : std::next(it);
    }
  }
}

// What became of the other ranks by collective #seq, each rank in at most one list.
struct RankVerdicts {
  std::vector<int> never_arrived;    // publishing, but never started #seq
  std::vector<int> stopped;          // stopped publishing
  std::vector<int> closed;           // closed their communicator
  std::vector<int> never_published;  // no record at all
};

RankVerdicts judgeRanks(const ProgressSnapshot& snapshot, int size, int self, uint64_t seq) {
  RankVerdicts verdicts;
  for (int r = 0; r < size; ++r) {
    const auto it = snapshot.latest.find(r);
    if (it == snapshot.latest.end()) {
      if (r != self) verdicts.never_published.push_back(r);
      continue;
    }
    // A silent or closed rank's record is final or stale, so whether it
    // would have arrived is unknown.
    if (it->second.closed) {
      verdicts.closed.push_back(r);
    } else if (snapshot.silent.count(r)) {
      verdicts.stopped.push_back(r);
    } else if (it->second.started < seq && r != self) {
      verdicts.never_arrived.push_back(r);
    }
  }
  return verdicts;
}

std::string verdictSentences(const RankVerdicts& verdicts, const ProgressSnapshot& snapshot, uint64_t seq,
                             const std::string& op, const PlaceOf& place_of) {
  std::vector<std::string> parts;
  if (!verdicts.never_arrived.empty()) {
    parts.push_back(rankNames(verdicts.never_arrived, place_of) + " never arrived at " + op + " #" +
                    std::to_string(seq) + " " + lastStartedNote(verdicts.never_arrived, snapshot.latest));
  }
  if (!verdicts.stopped.empty()) {
    parts.push_back(rankNames(verdicts.stopped, place_of) +
                    " stopped publishing progress (process dead or hung, or its host cut off?)");
  }
  if (!verdicts.closed.empty()) {
    parts.push_back(rankNames(verdicts.closed, place_of) + " closed " +
                    (verdicts.closed.size() == 1 ? "its" : "their") + " communicator (exited or destroyed it)");
  }
  if (!verdicts.never_published.empty()) {
    parts.push_back(rankNames(verdicts.never_published, place_of) +
                    " never published progress (never started, or using another store prefix?)");
  }
  return joinParts(parts, "; ");
}

}  // namespace

Milliseconds ProgressTracker::silenceWindow(Milliseconds interval) {
  return std::max<Milliseconds>(interval * (2 * kHeartbeatIntervals), kMinSilenceWindow);
}

ProgressTracker::ProgressTracker(std::shared_ptr<Store> store, std::string prefix, int rank,
                                 int size, Milliseconds interval, std::string host, std::string address)
    : store_(std::move(store)),
      prefix_(std::move(prefix)),
      rank_(rank),
      size_(size),
      interval_(interval),
      host_(std::move(host)),
      address_(std::move(address)) {
  // Publish before returning, so that a peer diagnosing a failure of the very
  // first collective finds this rank's record.
  publishOnce();
  thread_ = std::thread([this] { publishLoop(); });
}

ProgressTracker::~ProgressTracker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  // So that a peer still diagnosing says "closed" rather than "dead or hung".
  publishOnce(/*closing=*/true);
}

void ProgressTracker::started(uint64_t seq) { started_.store(seq, std::memory_order_relaxed); }
void ProgressTracker::completed(uint64_t seq) { completed_.store(seq, std::memory_order_relaxed); }

std::string ProgressTracker::keyFor(int rank) const {
  const std::string key = "progress/" + std::to_string(rank);
  return prefix_.empty() ? key : prefix_ + "/" + key;
}

std::string ProgressTracker::rosterKey() const { return prefix_.empty() ? "progress/roster" : prefix_ + "/progress/roster"; }

std::string ProgressTracker::placeOf(int rank, const std::string& host, const std::string& address) const {
  std::string where_host = host, where_address = address;
  if (where_host.empty()) {
    std::lock_guard<std::mutex> lock(roster_mutex_);
    if (rank >= 0 && static_cast<size_t>(rank) < roster_.size()) {
      where_host = roster_[rank].first;
      where_address = roster_[rank].second;
    }
  }
  std::string text;
  if (!where_host.empty()) text += " on " + where_host;
  if (!where_address.empty()) text += " (" + where_address + ")";
  return text;
}

void ProgressTracker::publishOnce(bool closing) {
  ++heartbeat_;
  std::string record = std::to_string(started_.load()) + " " + std::to_string(completed_.load()) +
                       " " + std::to_string(heartbeat_);
  if (!host_.empty() || !address_.empty()) record += " " + tokenOrUnknown(host_) + " " + tokenOrUnknown(address_);
  if (closing) record += std::string(" ") + kClosedMark;
  try {
    StoreDeadlineScope bounded(closing ? kPublishBudget / 2 : kPublishBudget);
    store_->set(keyFor(rank_), record);
    publish_failing_ = false;
  } catch (const std::exception& e) {
    if (!publish_failing_) DTRAIN_LOG_WARN("could not publish collective progress: " << e.what());
    publish_failing_ = true;
  }
}

void ProgressTracker::shareRoster() {
  {
    std::lock_guard<std::mutex> lock(roster_mutex_);
    if (!roster_.empty()) return;
  }
  try {
    StoreDeadlineScope bounded(kPublishBudget);
    std::string text;
    if (rank_ == 0) {
      std::vector<std::string> keys;
      for (int r = 0; r < size_; ++r) keys.push_back(keyFor(r));
      if (!store_->check(keys)) return;  // not everyone has published yet
      for (int r = 0; r < size_; ++r) {
        auto record = parseRecord(store_->get(keyFor(r)));
        text += (record ? tokenOrUnknown(record->host) + " " + tokenOrUnknown(record->address)
                        : std::string(kUnknown) + " " + kUnknown) + "\n";
      }
      store_->set(rosterKey(), text);
    } else {
      if (!store_->check({rosterKey()})) return;
      text = store_->get(rosterKey());
    }
    std::vector<std::pair<std::string, std::string>> roster;
    std::istringstream in(text);
    for (std::string host, address; in >> host >> address;) {
      roster.emplace_back(host == kUnknown ? "" : host, address == kUnknown ? "" : address);
    }
    if (static_cast<int>(roster.size()) != size_) return;
    std::lock_guard<std::mutex> lock(roster_mutex_);
    roster_ = std::move(roster);
  } catch (const std::exception&) {
    // The store is slow or away: publishOnce() has said so; try next turn.
  }
}

void ProgressTracker::publishLoop() {
  uint64_t last_started = started_.load();
  uint64_t last_completed = completed_.load();
  int quiet_intervals = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!cv_.wait_for(lock, interval_, [this] { return stop_; })) {
    const uint64_t now_started = started_.load();
    const uint64_t now_completed = completed_.load();
    const bool changed = now_started != last_started || now_completed != last_completed;
    bool roster_missing;
    {
      std::lock_guard<std::mutex> roster_lock(roster_mutex_);
      roster_missing = roster_.empty();
    }
    if (roster_missing) {
      lock.unlock();
      shareRoster();
      lock.lock();
      if (stop_) break;
    }
    if (!changed && ++quiet_intervals < kHeartbeatIntervals) continue;
    quiet_intervals = 0;
    last_started = now_started;
    last_completed = now_completed;
    lock.unlock();  // a slow store must not delay the destructor's stop request
    publishOnce();
    lock.lock();
  }
}

std::string ProgressTracker::diagnose(uint64_t seq, const std::string& op) {
  ProgressSnapshot snapshot;
  const PlaceOf place_of = [&](int r) {
    const auto it = snapshot.latest.find(r);
    return it == snapshot.latest.end() ? placeOf(r, "", "") : placeOf(r, it->second.host, it->second.address);
  };
  try {
    // Bounded whatever the store does: a diagnosis that cannot read the
    // store says so rather than holding up the error it explains.
    const Milliseconds window = silenceWindow(interval_);
    StoreDeadlineScope bounded(kDiagnosisBudget + window);
    std::vector<std::string> keys;
    for (int r = 0; r < size_; ++r) keys.push_back(keyFor(r));
    watchRecords(*store_, keys, rank_, interval_, window, snapshot);
    return verdictSentences(judgeRanks(snapshot, size_, rank_, seq), snapshot, seq, op, place_of);
  } catch (const std::exception& e) {
    std::string sentence = std::string("could not read the ranks' progress from the store: ") + e.what();
    // Unreachable store and failed collective together: most likely this
    // rank's host is cut off. Name the ranks elsewhere it lost, as far as
    // the roster read earlier knows them.
    std::vector<int> elsewhere;
    {
      std::lock_guard<std::mutex> lock(roster_mutex_);
      for (int r = 0; r < static_cast<int>(roster_.size()); ++r) {
        if (r != rank_ && roster_[r].first != host_) elsewhere.push_back(r);
      }
    }
    if (!elsewhere.empty()) {
      sentence += "; rank " + std::to_string(rank_) + placeOf(rank_, host_, address_) +
                  " may be cut off from the network: it lost " + lostRanksText(elsewhere, place_of) +
                  " on other hosts";
    }
    return sentence;
  }
}

}  // namespace dtrain
