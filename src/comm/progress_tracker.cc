#include "comm/progress_tracker.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>
#include <map>
#include <optional>
#include <set>
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

}  // namespace

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
  std::map<int, ProgressRecord> latest;
  // "ranks 1, 3 on node1 (10.0.0.2), rank 4 on node2 (10.0.0.3)": ranks grouped by where they run.
  auto names = [&](const std::vector<int>& ranks) {
    std::vector<std::pair<std::string, std::vector<int>>> groups;  // place suffix -> ranks
    for (int r : ranks) {
      const auto it = latest.find(r);
      const std::string place =
          it == latest.end() ? placeOf(r, "", "") : placeOf(r, it->second.host, it->second.address);
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
  };
  try {
    // Bounded whatever the store does: a diagnosis that cannot read the
    // store says so rather than holding up the error it explains.
    StoreDeadlineScope bounded(kDiagnosisBudget + interval_ * (2 * kHeartbeatIntervals));
    std::map<int, ProgressRecord> first;
    std::set<int> silent;  // ranks not yet seen publishing (again)
    for (int r = 0; r < size_; ++r) {
      silent.insert(r);
      if (!store_->check({keyFor(r)})) continue;
      // A record that does not parse counts as absent.
      if (auto record = parseRecord(store_->get(keyFor(r)))) first[r] = latest[r] = *record;
    }
    silent.erase(rank_);  // this thread is diagnosing, so this rank is alive
    for (int waited = 0; waited < 2 * kHeartbeatIntervals && !silent.empty(); ++waited) {
      std::this_thread::sleep_for(interval_);
      for (auto it = silent.begin(); it != silent.end();) {
        const int r = *it;
        std::optional<ProgressRecord> record;
        if (store_->check({keyFor(r)})) record = parseRecord(store_->get(keyFor(r)));
        const bool published_again =
            record && (!first.count(r) || record->heartbeat != first[r].heartbeat || record->closed);
        if (record) latest[r] = *record;
        it = published_again ? silent.erase(it) : std::next(it);
      }
    }

    std::vector<int> never_arrived, stopped, closed, never_published;
    for (int r = 0; r < size_; ++r) {
      if (!latest.count(r)) {
        if (r != rank_) never_published.push_back(r);
        continue;
      }
      // A silent or closed rank's record is final or stale, so whether it
      // would have arrived is unknown.
      if (latest[r].closed) {
        closed.push_back(r);
      } else if (silent.count(r)) {
        stopped.push_back(r);
      } else if (latest[r].started < seq && r != rank_) {
        never_arrived.push_back(r);
      }
    }
    std::vector<std::string> parts;
    if (!never_arrived.empty()) {
      parts.push_back(names(never_arrived) + " never arrived at " + op + " #" + std::to_string(seq) + " " +
                      lastStartedNote(never_arrived, latest));
    }
    if (!stopped.empty()) {
      parts.push_back(names(stopped) + " stopped publishing progress (process dead or hung, or its host cut off?)");
    }
    if (!closed.empty()) {
      parts.push_back(names(closed) + " closed " + (closed.size() == 1 ? "its" : "their") +
                      " communicator (exited or destroyed it)");
    }
    if (!never_published.empty()) {
      parts.push_back(names(never_published) +
                      " never published progress (never started, or using another store prefix?)");
    }
    return joinParts(parts, "; ");
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
      constexpr size_t kListed = 8;
      const size_t more = elsewhere.size() > kListed ? elsewhere.size() - kListed : 0;
      elsewhere.resize(std::min(elsewhere.size(), kListed));
      sentence += "; rank " + std::to_string(rank_) + placeOf(rank_, host_, address_) + " may be cut off from the network: it lost " +
                  names(elsewhere) + (more ? " and " + std::to_string(more) + " more" : "") + " on other hosts";
    }
    return sentence;
  }
}

}  // namespace dtrain
