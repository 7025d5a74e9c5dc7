#include "rendezvous/keep_alive.h"

#include <gtest/gtest.h>

#include "rendezvous_test_util.h"
#include "store/hash_store.h"

namespace dtrain::testing {
namespace {

KeepAlive::Options optionsFor(const std::string& node, milliseconds interval, int max_attempt) {
  KeepAlive::Options options;
  options.key_prefix = "/run/r/rdzv/heartbeat";
  options.node_id = node;
  options.interval = interval;
  options.max_attempt = max_attempt;
  return options;
}

std::unique_ptr<KeepAlive> keepAlive(const std::shared_ptr<Store>& store, const std::string& node,
                                     milliseconds interval, int max_attempt) {
  return std::make_unique<KeepAlive>(
      optionsFor(node, interval, max_attempt), store, [store] { return store; },
      [](Store&) { return std::vector<std::string>{"a", "b", "c"}; });
}

TEST(KeepAliveTest, TheCounterExistsOnceConstructedAndKeepsMoving) {
  auto store = std::make_shared<HashStore>();
  auto a = keepAlive(store, "a", milliseconds(20), 3);
  EXPECT_GE(store->add("/run/r/rdzv/heartbeat/a", 0), 1);
  const int64_t first = store->add("/run/r/rdzv/heartbeat/a", 0);
  EXPECT_TRUE(eventually([&] { return store->add("/run/r/rdzv/heartbeat/a", 0) >= first + 3; }));
}

TEST(KeepAliveTest, APeerThatStopsBeatingIsDeadAfterTheThreshold) {
  auto store = std::make_shared<HashStore>();
  auto a = keepAlive(store, "a", milliseconds(50), 4);  // dead after 200 ms
  auto b = keepAlive(store, "b", milliseconds(50), 4);
  // Alive while beating, however long it is watched.
  auto watch_until = SteadyClock::now() + milliseconds(600);
  while (SteadyClock::now() < watch_until) {
    ASSERT_FALSE(a->isDead("b"));
    std::this_thread::sleep_for(milliseconds(20));
  }
  const auto stopped = SteadyClock::now();
  b->stop();
  EXPECT_TRUE(eventually([&] { return a->isDead("b"); }, seconds(10)));
  EXPECT_GE(secondsSince(stopped), 0.2 - 0.05) << "dead before the threshold";
  // "c" never beat: watched long enough, it is dead too; never watched, not.
  EXPECT_TRUE(a->isDead("c"));
  EXPECT_FALSE(a->isDead("never-listed"));
}

TEST(KeepAliveTest, AFreshObserverDoesNotCallAPeerDeadBeforeWatchingItLongEnough) {
  auto store = std::make_shared<HashStore>();
  store->add("/run/r/rdzv/heartbeat/c", 5);  // "c" beat once long ago
  const auto start = SteadyClock::now();
  auto a = keepAlive(store, "a", milliseconds(50), 4);
  EXPECT_FALSE(a->isDead("c"));
  EXPECT_TRUE(eventually([&] { return a->isDead("c"); }, seconds(10)));
  EXPECT_GE(secondsSince(start), 0.2 - 0.05);
}

TEST(KeepAliveTest, APeerWhosePresenceKeyVanishesIsDeadWithoutWaitingForTheCounters) {
  auto store = std::make_shared<HashStore>();
  auto options = [](const std::string& node) {
    KeepAlive::Options o = optionsFor(node, milliseconds(200), 50);  // counters: dead after 10 s
    o.presence_prefix = "/run/r/rdzv/present";
    o.presence_interval = milliseconds(50);
    return o;
  };
  auto peers = [](Store&) { return std::vector<std::string>{"a", "b"}; };
  KeepAlive a(options("a"), store, [store] { return store; }, peers);
  auto b = std::make_unique<KeepAlive>(options("b"), store, [store] { return store; }, peers);
  EXPECT_TRUE(store->check({"/run/r/rdzv/present/b"}));
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_FALSE(a.isDead("b"));
  // What the server does when b's connection closes (HashStore has none).
  b->stop();
  store->deleteKey("/run/r/rdzv/present/b");
  const auto gone = SteadyClock::now();
  EXPECT_TRUE(eventually([&] { return a.isDead("b"); }, seconds(5)));
  EXPECT_LT(secondsSince(gone), 2.0);
}

}  // namespace
}  // namespace dtrain::testing
