#include "comm/progress_tracker.h"

#include <cstdio>
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
};

constexpr const char* kClosedMark = "closed";

std::optional<ProgressRecord> parseRecord(const std::string& text) {
  ProgressRecord record;
  unsigned long long started = 0, completed = 0, heartbeat = 0;
  if (std::sscanf(text.c_str(), "%llu %llu %llu", &started, &completed, &heartbeat) != 3) {
    return std::nullopt;
  }
  record.started = started;
  record.completed = completed;
  record.heartbeat = heartbeat;
  record.closed = text.find(kClosedMark) != std::string::npos;
  return record;
}

std::string rankNames(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  return text;
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
                                 int size, Milliseconds interval)
    : store_(std::move(store)),
      prefix_(std::move(prefix)),
      rank_(rank),
      size_(size),
      interval_(interval) {
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

void ProgressTracker::publishOnce(bool closing) {
  ++heartbeat_;
  std::string record = std::to_string(started_.load()) + " " + std::to_string(completed_.load()) +
                       " " + std::to_string(heartbeat_);
  if (closing) record += std::string(" ") + kClosedMark;
  try {
    store_->set(keyFor(rank_), record);
    publish_failing_ = false;
  } catch (const std::exception& e) {
    if (!publish_failing_) DTRAIN_LOG_WARN("could not publish collective progress: " << e.what());
    publish_failing_ = true;
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
  try {
    std::map<int, ProgressRecord> first;
    std::map<int, ProgressRecord> latest;
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
      parts.push_back(rankNames(never_arrived) + " never arrived at " + op + " #" +
                      std::to_string(seq) + " " + lastStartedNote(never_arrived, latest));
    }
    if (!stopped.empty()) {
      parts.push_back(rankNames(stopped) + " stopped publishing progress (process dead or hung?)");
    }
    if (!closed.empty()) {
      parts.push_back(rankNames(closed) + " closed " + (closed.size() == 1 ? "its" : "their") +
                      " communicator (exited or destroyed it)");
    }
    if (!never_published.empty()) {
      parts.push_back(rankNames(never_published) +
                      " never published progress (never started, or using another store prefix?)");
    }
    std::string sentence;
    for (const auto& part : parts) sentence += (sentence.empty() ? "" : "; ") + part;
    return sentence;
  } catch (const std::exception& e) {
    return std::string("could not read the ranks' progress from the store: ") + e.what();
  }
}

}  // namespace dtrain
