#include "comm/bootstrap.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <vector>

#include "common/error.h"
#include "store/hash_store.h"
#include "tests/comm/rank_threads.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;
using testing::contains;
using testing::errorIs;
using testing::errorText;
using testing::runOnRankThreads;
using Clock = std::chrono::steady_clock;

// One thread per entry of `claims` ({rank, world size}) over one store.
struct Claim {
  int rank;
  int size;
};
std::vector<std::exception_ptr> bootstrapAll(const std::vector<Claim>& claims, Milliseconds timeout) {
  HashStore store;
  return runOnRankThreads(static_cast<int>(claims.size()), [&](int index) {
    checkGroupConsistency(store, claims[index].rank, claims[index].size, timeout);
  });
}

TEST(BootstrapTest, EveryRankJoinsForSeveralSizes) {
  for (int size : {1, 3, 8}) {
    std::vector<Claim> claims;
    for (int r = 0; r < size; ++r) claims.push_back({r, size});
    for (const auto& error : bootstrapAll(claims, 10s)) EXPECT_EQ(error, nullptr) << errorText(error);
  }
}

TEST(BootstrapTest, DuplicateRankIsConfigErrorNamingBothOwnersAndStopsEveryone) {
  const auto start = Clock::now();
  auto errors = bootstrapAll({{0, 3}, {1, 3}, {1, 3}}, 30s);
  EXPECT_LT(Clock::now() - start, 5s) << "ranks waited for the timeout instead of the abort";
  int second_claimers = 0;
  for (const auto& error : errors) {
    ASSERT_TRUE(errorIs<ConfigError>(error)) << errorText(error);
    const std::string text = errorText(error);
    EXPECT_TRUE(contains(text, "rank 1 claimed twice (by ")) << text;
    EXPECT_TRUE(contains(text, ":" + std::to_string(getpid()) + ":")) << text;  // host:pid:random
    if (!contains(text, "group aborted")) ++second_claimers;
  }
  EXPECT_EQ(second_claimers, 1);
}

TEST(BootstrapTest, WorldSizeMismatchNamesBothValuesOnEveryRank) {
  const auto start = Clock::now();
  auto errors = bootstrapAll({{0, 4}, {1, 4}, {2, 3}, {3, 4}}, 30s);
  EXPECT_LT(Clock::now() - start, 5s) << "ranks waited for the timeout instead of the abort";
  EXPECT_TRUE(errorIs<ConfigError>(errors[2]));
  EXPECT_TRUE(contains(errorText(errors[2]), "WORLD_SIZE mismatch: this rank says 3, rank 0 says 4"))
      << errorText(errors[2]);
  for (int r : {0, 1, 3}) {
    EXPECT_TRUE(errorIs<ConfigError>(errors[r])) << errorText(errors[r]);
    EXPECT_TRUE(contains(errorText(errors[r]), "WORLD_SIZE mismatch: rank 2 says 3, rank 0 says 4"))
        << errorText(errors[r]);
  }
}

TEST(BootstrapTest, RankZeroWithAnotherSizeFailsEveryRank) {
  auto errors = bootstrapAll({{0, 5}, {1, 4}, {2, 4}, {3, 4}}, 30s);
  for (const auto& error : errors) {
    EXPECT_TRUE(errorIs<ConfigError>(error)) << errorText(error);
    EXPECT_TRUE(contains(errorText(error), "says 4, rank 0 says 5")) << errorText(error);
  }
}

TEST(BootstrapTest, RanksThatNeverJoinAreNamedInTimeoutError) {
  const auto start = Clock::now();
  auto errors = bootstrapAll({{0, 5}, {1, 5}, {3, 5}}, 300ms);
  EXPECT_GE(Clock::now() - start, 300ms);
  for (const auto& error : errors) {
    EXPECT_TRUE(errorIs<TimeoutError>(error)) << errorText(error);
    EXPECT_TRUE(contains(errorText(error), "ranks 2, 4 never joined")) << errorText(error);
    EXPECT_TRUE(contains(errorText(error), "300 ms")) << errorText(error);
  }
}

TEST(BootstrapTest, MissingRankZeroIsNamedToo) {
  auto errors = bootstrapAll({{1, 2}}, 200ms);
  EXPECT_TRUE(errorIs<TimeoutError>(errors[0])) << errorText(errors[0]);
  EXPECT_TRUE(contains(errorText(errors[0]), "rank 0 never joined")) << errorText(errors[0]);
}

TEST(BootstrapTest, RankOutOfRangeIsConfigErrorAndStopsTheOthers) {
  const auto start = Clock::now();
  auto errors = bootstrapAll({{0, 3}, {1, 3}, {3, 3}}, 30s);
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_TRUE(contains(errorText(errors[2]), "rank 3 is out of range for WORLD_SIZE 3; expected 0..2"))
      << errorText(errors[2]);
  for (int r : {0, 1}) {
    EXPECT_TRUE(errorIs<ConfigError>(errors[r])) << errorText(errors[r]);
    EXPECT_TRUE(contains(errorText(errors[r]), "rank 3, which is out of range")) << errorText(errors[r]);
  }
  HashStore store;
  EXPECT_THROW(checkGroupConsistency(store, -1, 2, 1s), ConfigError);
  EXPECT_THROW(checkGroupConsistency(store, 0, 0, 1s), ConfigError);
}

TEST(BootstrapTest, OwnerTokensAreUniqueAndNameHostAndPid) {
  const std::string a = makeOwnerToken();
  const std::string b = makeOwnerToken();
  EXPECT_NE(a, b);
  EXPECT_TRUE(contains(a, ":" + std::to_string(getpid()) + ":")) << a;
}

TEST(BootstrapTest, FirstAbortReasonWins) {
  HashStore store;
  EXPECT_EQ(groupAbortReason(store), std::nullopt);
  abortGroup(store, "first");
  abortGroup(store, "second");
  EXPECT_EQ(groupAbortReason(store), "first");
}

}  // namespace
}  // namespace dtrain
