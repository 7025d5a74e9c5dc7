// DistributedSampler against PyTorch's semantics: padding, drop_last,
// rank striding, (seed, epoch) determinism, and mid-epoch resume.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "common/error.h"
#include "data/distributed_sampler.h"

namespace dtrain::data {
namespace {

using Indices = std::vector<int64_t>;

std::vector<Indices> allRanks(int64_t n, int64_t replicas, bool shuffle, bool drop_last,
                              uint64_t seed = 0, int64_t epoch = 0) {
  std::vector<Indices> out;
  for (int64_t r = 0; r < replicas; ++r) {
    DistributedSampler s(n, replicas, r, shuffle, seed, drop_last);
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

// Values worked out from torch/utils/data/distributed.py for N=10, 3 replicas.
TEST(DistributedSamplerTest, MatchesPyTorchArithmeticForTenOverThree) {
  EXPECT_EQ(allRanks(10, 3, /*shuffle=*/false, /*drop_last=*/false),
            (std::vector<Indices>{{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}}));
  EXPECT_EQ(allRanks(10, 3, /*shuffle=*/false, /*drop_last=*/true),
            (std::vector<Indices>{{0, 3, 6}, {1, 4, 7}, {2, 5, 8}}));
  DistributedSampler pad(10, 3, 0, false, 0, false), drop(10, 3, 0, false, 0, true);
  EXPECT_EQ(pad.num_samples(), 4);
  EXPECT_EQ(pad.total_size(), 12);
  EXPECT_EQ(drop.num_samples(), 3);
  EXPECT_EQ(drop.total_size(), 9);
}

// Padding longer than the dataset repeats it: [0, 1] -> [0, 1, 0, 1, 0].
TEST(DistributedSamplerTest, PadsByRepeatingWhenDatasetIsSmallerThanReplicas) {
  EXPECT_EQ(allRanks(2, 5, false, false), (std::vector<Indices>{{0}, {1}, {0}, {1}, {0}}));
  EXPECT_EQ(allRanks(2, 5, false, true), (std::vector<Indices>(5)));
  EXPECT_EQ(allRanks(0, 3, true, false), (std::vector<Indices>(3)));
}

TEST(DistributedSamplerTest, UnionCoversDatasetWithPadAndDropLast) {
  for (int64_t n : {1, 7, 10, 64, 101}) {
    for (int64_t replicas : {1, 2, 3, 8}) {
      for (bool shuffle : {false, true}) {
        // Padded: every index at least once, extra copies = total - n.
        auto pad = allRanks(n, replicas, shuffle, false, 7, 3);
        std::map<int64_t, int> count;
        for (const auto& r : pad) {
          EXPECT_EQ(static_cast<int64_t>(r.size()), (n + replicas - 1) / replicas);
          for (int64_t i : r) ++count[i];
        }
        EXPECT_EQ(static_cast<int64_t>(count.size()), n) << n << "/" << replicas;
        EXPECT_EQ(count.begin()->first, 0);
        EXPECT_EQ(count.rbegin()->first, n - 1);

        // drop_last: disjoint, floor(n / replicas) * replicas distinct indices.
        auto drop = allRanks(n, replicas, shuffle, true, 7, 3);
        std::set<int64_t> seen;
        for (const auto& r : drop) {
          EXPECT_EQ(static_cast<int64_t>(r.size()), n / replicas);
          for (int64_t i : r) {
            EXPECT_TRUE(seen.insert(i).second) << "index " << i << " twice";
            EXPECT_LT(i, n);
          }
        }
        EXPECT_EQ(static_cast<int64_t>(seen.size()), n / replicas * replicas);
        if (!shuffle && !seen.empty()) {
          EXPECT_EQ(*seen.rbegin(), n / replicas * replicas - 1);
        }
      }
    }
  }
}

TEST(DistributedSamplerTest, ShuffleIsDeterministicPerSeedAndEpoch) {
  auto a = allRanks(100, 4, true, false, /*seed=*/5, /*epoch=*/2);
  EXPECT_EQ(a, allRanks(100, 4, true, false, 5, 2));
  EXPECT_NE(a, allRanks(100, 4, true, false, 5, 3));
  EXPECT_NE(a, allRanks(100, 4, true, false, 6, 2));
  EXPECT_NE(a, allRanks(100, 4, false, false, 5, 2));

  // PyTorch seeds with seed + epoch, so (5, 2) and (6, 1) shuffle alike.
  EXPECT_EQ(a, allRanks(100, 4, true, false, 6, 1));

  // set_epoch on one sampler changes its order, and going back restores it.
  DistributedSampler s(100, 4, 1, true, 5);
  s.set_epoch(2);
  Indices e2 = s.indices();
  s.set_epoch(3);
  EXPECT_NE(s.indices(), e2);
  s.set_epoch(2);
  EXPECT_EQ(s.indices(), e2);
  EXPECT_EQ(e2, a[1]);
}

TEST(DistributedSamplerTest, ResumeFromOffsetIsTailOfFullList) {
  for (bool drop_last : {false, true}) {
    DistributedSampler s(103, 4, 3, true, 11, drop_last);
    s.set_epoch(9);
    Indices full = s.indices();
    ASSERT_EQ(static_cast<int64_t>(full.size()), s.num_samples());
    for (int64_t k = 0; k <= s.num_samples(); ++k) {
      EXPECT_EQ(s.indices(k), Indices(full.begin() + k, full.end())) << "offset " << k;
    }
    EXPECT_THROW(s.indices(s.num_samples() + 1), ConfigError);
    EXPECT_THROW(s.indices(-1), ConfigError);
  }
}

TEST(DistributedSamplerTest, BadArgumentsAreConfigErrors) {
  EXPECT_THROW(DistributedSampler(10, 0, 0), ConfigError);
  EXPECT_THROW(DistributedSampler(10, 3, 3), ConfigError);
  EXPECT_THROW(DistributedSampler(10, 3, -1), ConfigError);
  EXPECT_THROW(DistributedSampler(-1, 3, 0), ConfigError);
  try {
    DistributedSampler(10, 2, 5);
    ADD_FAILURE() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.message().find("rank is 5; expected 0..1"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace dtrain::data
