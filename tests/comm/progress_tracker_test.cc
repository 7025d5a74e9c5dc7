#include "comm/progress_tracker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "common/error.h"
#include "store/hash_store.h"
#include "tests/comm/rank_threads.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;
using testing::contains;
using Clock = std::chrono::steady_clock;

// Long enough that a loaded 2-core machine still sees every live heartbeat
// inside the diagnosis window.
constexpr Milliseconds kInterval{50};

struct Record {
  unsigned long long started = 0, completed = 0, heartbeat = 0;
};
Record readRecord(Store& store, const std::string& key) {
  Record record;
  std::sscanf(store.get(key).c_str(), "%llu %llu %llu", &record.started, &record.completed,
              &record.heartbeat);
  return record;
}

// Polls until `predicate` holds or two seconds pass.
template <typename Predicate>
bool eventually(Predicate predicate) {
  const auto deadline = Clock::now() + 2s;
  while (Clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return predicate();
}

std::vector<std::unique_ptr<ProgressTracker>> trackers(std::shared_ptr<Store> store, int size,
                                                       int count) {
  std::vector<std::unique_ptr<ProgressTracker>> out;
  for (int r = 0; r < count; ++r) out.push_back(std::make_unique<ProgressTracker>(store, "g", r, size, kInterval));
  return out;
}

TEST(ProgressTrackerTest, PublishesAtConstructionThenChangesAndHeartbeats) {
  auto store = std::make_shared<HashStore>();
  ProgressTracker tracker(store, "group", 0, 1, kInterval);
  ASSERT_TRUE(store->check({"group/progress/0"}));  // before the first interval
  EXPECT_EQ(store->get("group/progress/0"), "0 0 1");
  tracker.started(5);
  tracker.completed(4);
  EXPECT_TRUE(eventually([&] {
    Record r = readRecord(*store, "group/progress/0");
    return r.started == 5 && r.completed == 4;
  }));
  const auto beat = readRecord(*store, "group/progress/0").heartbeat;
  EXPECT_TRUE(eventually([&] { return readRecord(*store, "group/progress/0").heartbeat > beat; }))
      << "an idle tracker must still publish a heartbeat";
}

TEST(ProgressTrackerTest, EmptyPrefixPublishesUnderProgress) {
  auto store = std::make_shared<HashStore>();
  ProgressTracker tracker(store, "", 3, 4, kInterval);
  EXPECT_TRUE(store->check({"progress/3"}));
}

TEST(ProgressTrackerTest, DiagnosisIsEmptyWhenEveryRankArrivedAndLives) {
  auto store = std::make_shared<HashStore>();
  auto group = trackers(store, 3, 3);
  for (auto& t : group) t->started(4);
  const auto start = Clock::now();
  EXPECT_EQ(group[0]->diagnose(4, "allreduce"), "");
  EXPECT_LT(Clock::now() - start, 2 * ProgressTracker::kHeartbeatIntervals * kInterval + 200ms);
}

TEST(ProgressTrackerTest, NamesRanksThatNeverArrivedWithTheirLastStart) {
  auto store = std::make_shared<HashStore>();
  auto group = trackers(store, 4, 4);
  for (int r : {0, 2}) group[r]->started(42);
  group[1]->started(41);
  group[3]->started(41);
  std::string one_lag = group[0]->diagnose(42, "allreduce");
  EXPECT_EQ(one_lag, "ranks 1, 3 never arrived at allreduce #42 (last started #41)");
  group[3]->started(40);
  std::string two_lags = group[0]->diagnose(42, "allreduce");
  EXPECT_EQ(two_lags, "ranks 1, 3 never arrived at allreduce #42 (last started: rank 1 #41, rank 3 #40)");
}

TEST(ProgressTrackerTest, NamesRankThatStoppedPublishing) {
  auto store = std::make_shared<HashStore>();
  auto group = trackers(store, 3, 2);
  for (auto& t : group) t->started(7);
  store->set("g/progress/2", "7 6 5");  // a process that died: its record never changes again
  const std::string diagnosis = group[0]->diagnose(7, "broadcast");
  EXPECT_EQ(diagnosis, "rank 2 stopped publishing progress (process dead or hung, or its host cut off?)");
}

// A live rank whose publisher is starved of CPU for longer than a few
// intervals (a loaded host) is still alive: it must not be called dead.
TEST(ProgressTrackerTest, ARankSilentForLessThanTheMinimumWindowIsNotNamedStopped) {
  auto store = std::make_shared<HashStore>();
  auto group = trackers(store, 3, 2);
  for (auto& t : group) t->started(7);
  store->set("g/progress/2", "7 6 5");
  const Milliseconds late = ProgressTracker::kMinSilenceWindow / 2;
  ASSERT_GT(late, 2 * ProgressTracker::kHeartbeatIntervals * kInterval);
  std::thread starved([&] {
    std::this_thread::sleep_for(late);
    store->set("g/progress/2", "7 6 6");
  });
  const auto start = Clock::now();
  const std::string diagnosis = group[0]->diagnose(7, "broadcast");
  starved.join();
  EXPECT_EQ(diagnosis, "");
  EXPECT_GE(Clock::now() - start, late);
}

TEST(ProgressTrackerTest, NamesRankThatClosedItsCommunicator) {
  auto store = std::make_shared<HashStore>();
  auto group = trackers(store, 3, 3);
  for (auto& t : group) t->started(7);
  group[1].reset();
  EXPECT_TRUE(contains(store->get("g/progress/1"), "closed"));
  const std::string diagnosis = group[0]->diagnose(7, "broadcast");
  EXPECT_EQ(diagnosis, "rank 1 closed its communicator (exited or destroyed it)");
}

TEST(ProgressTrackerTest, NamesRankThatNeverPublished) {
  auto store = std::make_shared<HashStore>();
  auto group = trackers(store, 3, 2);
  for (auto& t : group) t->started(1);
  const std::string diagnosis = group[1]->diagnose(1, "barrier");
  EXPECT_TRUE(contains(diagnosis, "rank 2 never published progress")) << diagnosis;
}

class FailingStore : public HashStore {
 public:
  bool check(const std::vector<std::string>& keys) override {
    if (failing) throw IoError("connection to store lost");
    return HashStore::check(keys);
  }
  void set(const std::string& key, const std::string& value) override {
    if (failing) throw IoError("connection to store lost");
    HashStore::set(key, value);
  }
  std::atomic<bool> failing{false};
};

TEST(ProgressTrackerTest, UnreachableStoreYieldsASentenceNotAnException) {
  auto store = std::make_shared<FailingStore>();
  ProgressTracker tracker(store, "g", 0, 2, kInterval);
  store->failing = true;
  std::string diagnosis;
  EXPECT_NO_THROW(diagnosis = tracker.diagnose(3, "allgather"));
  EXPECT_TRUE(contains(diagnosis, "could not read the ranks' progress from the store")) << diagnosis;
  EXPECT_TRUE(contains(diagnosis, "connection to store lost")) << diagnosis;
}

TEST(ProgressTrackerTest, NamesTheHostAndAddressOfEachRankItBlames) {
  auto store = std::make_shared<HashStore>();
  ProgressTracker r0(store, "g", 0, 4, kInterval, "node0", "10.0.0.1");
  ProgressTracker r1(store, "g", 1, 4, kInterval, "node1", "10.0.0.2");
  store->set("g/progress/2", "7 6 5 node1 10.0.0.2");  // dead: never changes again
  store->set("g/progress/3", "7 6 5 node2 10.0.0.3");
  r0.started(7);
  r1.started(7);
  EXPECT_EQ(r0.diagnose(7, "allreduce"),
            "rank 2 on node1 (10.0.0.2), rank 3 on node2 (10.0.0.3) stopped publishing progress "
            "(process dead or hung, or its host cut off?)");
}

TEST(ProgressTrackerTest, ARankCutOffFromTheStoreNamesThePeersOnOtherHostsFromTheRoster) {
  auto store = std::make_shared<FailingStore>();
  ProgressTracker r0(store, "g", 0, 3, kInterval, "node0", "10.0.0.1");
  ProgressTracker r1(store, "g", 1, 3, kInterval, "node0", "10.0.0.1");
  ProgressTracker r2(store, "g", 2, 3, kInterval, "node1", "10.0.0.2");
  // Rank 0 stores the roster once all three have published; the others read it.
  ASSERT_TRUE(eventually([&] { return store->HashStore::check({"g/progress/roster"}); }));
  std::this_thread::sleep_for(kInterval * 4);  // every publisher has had a turn to read it
  store->failing = true;
  const std::string diagnosis = r2.diagnose(9, "allreduce");
  EXPECT_TRUE(contains(diagnosis, "could not read the ranks' progress from the store")) << diagnosis;
  EXPECT_TRUE(contains(diagnosis, "rank 2 on node1 (10.0.0.2) may be cut off from the network: it lost "
                                  "ranks 0, 1 on node0 (10.0.0.1) on other hosts")) << diagnosis;
  store->failing = false;
}

}  // namespace
}  // namespace dtrain
