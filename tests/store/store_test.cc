// The Store contract (store.h), run against every implementation (see the
// INSTANTIATE_TEST_SUITE_P in hash_store_test.cc, tcp_store_test.cc,
// prefix_store_test.cc), and storeBarrier.
#include "store/store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <thread>

#include "common/error.h"
#include "store_contract.h"

namespace dtrain::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// "Does not hang": far above what any of these takes, even on a loaded machine.
constexpr seconds kNoHang{30};

TEST_P(StoreContractTest, SetThenGetReturnsTheLatestValue) {
  store_->set("greeting", "hello");
  EXPECT_EQ(store_->get("greeting"), "hello");
  store_->set("greeting", "bye");
  EXPECT_EQ(store_->get("greeting"), "bye");
}

TEST_P(StoreContractTest, ValuesAreArbitraryBytes) {
  const std::string binary("\0\x01\xff\n\0end", 8);
  store_->set("binary", binary);
  EXPECT_EQ(store_->get("binary"), binary);
  store_->set("empty", "");
  EXPECT_EQ(store_->get("empty"), "");
  std::string big(1 << 20, 'x');
  big[12345] = '\0';
  store_->set("big", big);
  EXPECT_EQ(store_->get("big"), big);
}

TEST_P(StoreContractTest, GetBlocksUntilAnotherClientSetsTheKey) {
  auto reader = harness_->client();
  auto value = std::async(std::launch::async, [&] { return reader->get("late-key"); });
  // The reader is (most likely) blocked by now; the result is the same if not.
  std::this_thread::sleep_for(milliseconds(50));
  store_->set("late-key", "arrived");
  ASSERT_EQ(value.wait_for(kNoHang), std::future_status::ready);
  EXPECT_EQ(value.get(), "arrived");
}

TEST_P(StoreContractTest, GetOfAMissingKeyTimesOutNamingTheKey) {
  store_->setTimeout(milliseconds(200));
  try {
    store_->get("never-set-key");
    FAIL() << "get() of a missing key returned";
  } catch (const TimeoutError& e) {
    EXPECT_NE(e.message().find("never-set-key"), std::string::npos) << e.message();
  }
  store_->set("after-timeout", "ok");  // the store is still usable
  EXPECT_EQ(store_->get("after-timeout"), "ok");
}

TEST_P(StoreContractTest, AddCreatesAtZeroAndReturnsTheNewValue) {
  EXPECT_EQ(store_->add("counter", 5), 5);
  EXPECT_EQ(store_->add("counter", -2), 3);
  EXPECT_EQ(store_->add("counter", 0), 3);
  EXPECT_EQ(store_->get("counter"), "3");
  store_->set("preset", "40");
  EXPECT_EQ(store_->add("preset", 2), 42);
}

TEST_P(StoreContractTest, AddOnANonIntegerValueIsAConfigErrorNamingTheKey) {
  store_->set("text-key", "abc");
  try {
    store_->add("text-key", 1);
    FAIL() << "add() on a non-integer value succeeded";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.message().find("text-key'"), std::string::npos) << e.message();
  }
  EXPECT_EQ(store_->get("text-key"), "abc");
  EXPECT_EQ(store_->add("other-counter", 1), 1);
}

TEST_P(StoreContractTest, CompareSetOnAnAbsentKey) {
  // An absent key matches only an empty `expected`...
  EXPECT_EQ(store_->compareSet("cas-new", "", "first"), "first");
  EXPECT_EQ(store_->get("cas-new"), "first");
  // ...and otherwise the call returns `expected` and creates nothing (c10d).
  EXPECT_EQ(store_->compareSet("cas-absent", "guess", "value"), "guess");
  EXPECT_FALSE(store_->check({"cas-absent"}));
}

TEST_P(StoreContractTest, CompareSetOnAPresentKey) {
  store_->set("cas", "v1");
  EXPECT_EQ(store_->compareSet("cas", "v1", "v2"), "v2");
  EXPECT_EQ(store_->get("cas"), "v2");
  EXPECT_EQ(store_->compareSet("cas", "v1", "v3"), "v2") << "a mismatch returns the current value";
  EXPECT_EQ(store_->get("cas"), "v2");
  EXPECT_EQ(store_->compareSet("cas", "", "v4"), "v2") << "empty expected does not match a value";
  store_->set("cas-empty", "");
  EXPECT_EQ(store_->compareSet("cas-empty", "", "filled"), "filled");
}

TEST_P(StoreContractTest, WaitReturnsOnceEveryKeyExists) {
  auto waiter = harness_->client();
  auto done = std::async(std::launch::async, [&] { waiter->wait({"wait-a", "wait-b"}, seconds(60)); });
  std::this_thread::sleep_for(milliseconds(20));
  store_->set("wait-a", "1");
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(store_->compareSet("wait-b", "", "2"), "2");  // compareSet creating a key wakes too
  ASSERT_EQ(done.wait_for(kNoHang), std::future_status::ready);
  done.get();
  store_->wait({});  // no keys: nothing to wait for
  store_->wait({"wait-a"}, milliseconds(0));  // present keys need no time
}

TEST_P(StoreContractTest, WaitTimeoutNamesOnlyTheMissingKeys) {
  store_->set("present-key", "1");
  try {
    store_->wait({"present-key", "missing-one", "missing-two"}, milliseconds(200));
    FAIL() << "wait() for missing keys returned";
  } catch (const TimeoutError& e) {
    EXPECT_NE(e.message().find("missing-one"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("missing-two"), std::string::npos) << e.message();
    EXPECT_EQ(e.message().find("present-key"), std::string::npos) << e.message();
  }
}

TEST_P(StoreContractTest, CheckReportsWhetherAllKeysExist) {
  EXPECT_TRUE(store_->check({}));
  EXPECT_FALSE(store_->check({"check-a"}));
  store_->set("check-a", "1");
  EXPECT_TRUE(store_->check({"check-a"}));
  EXPECT_FALSE(store_->check({"check-a", "check-b"}));
}

TEST_P(StoreContractTest, DeleteKeyReportsWhetherTheKeyExisted) {
  store_->set("doomed", "1");
  EXPECT_TRUE(store_->deleteKey("doomed"));
  EXPECT_FALSE(store_->deleteKey("doomed"));
  EXPECT_FALSE(store_->check({"doomed"}));
  store_->setTimeout(milliseconds(100));
  EXPECT_THROW(store_->get("doomed"), TimeoutError);
}

TEST_P(StoreContractTest, NumKeysCountsTheKeys) {
  EXPECT_EQ(store_->numKeys(), 0);
  store_->set("n1", "a");
  store_->set("n2", "b");
  store_->add("n3", 1);
  store_->set("n1", "again");
  EXPECT_EQ(store_->numKeys(), 3);
  store_->deleteKey("n2");
  EXPECT_EQ(store_->numKeys(), 2);
}

TEST_P(StoreContractTest, ConcurrentAddsAreAtomic) {
  constexpr int kClients = 8;
  constexpr int kAddsEach = 200;
  std::vector<std::vector<int64_t>> seen(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i, client = harness_->client()] {
      for (int j = 0; j < kAddsEach; ++j) seen[i].push_back(client->add("atomic", 1));
    });
  }
  for (auto& t : threads) t.join();
  std::vector<int64_t> all;
  for (auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), size_t{kClients * kAddsEach});
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], static_cast<int64_t>(i + 1));
}

TEST_P(StoreContractTest, BarrierReleasesEveryRankOnlyWhenAllArrived) {
  constexpr int kRanks = 8;
  std::atomic<int> arrived{0};
  std::atomic<int> released_early{0};
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kRanks; ++rank) {
    threads.emplace_back([&, client = harness_->client()] {
      arrived.fetch_add(1);
      storeBarrier(*client, "barrier/0", kRanks, seconds(60));
      if (arrived.load() != kRanks) released_early.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(released_early.load(), 0);
  EXPECT_EQ(store_->get("barrier/0/count"), std::to_string(kRanks));
}

TEST_P(StoreContractTest, BarrierTimesOutWhenARankIsMissing) {
  EXPECT_THROW(storeBarrier(*store_, "lonely", 2, milliseconds(100)), TimeoutError);
}

}  // namespace
}  // namespace dtrain::testing
