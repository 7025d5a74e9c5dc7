// TokenDataset: windows of seq_len + 1 tokens, their order per epoch and
// rank (every window once, no overlap, reproducible, resumable), the
// validation pass, and the errors for data and options that cannot work.
// The source's token at position i is i, so a row names its own window.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "data/token_dataset.h"
#include "data/token_shard_set.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::data {
namespace {

using ::testing::HasSubstr;
using testing::configErrorOf;

// Tokens 0, 1, ..., count - 1.
std::shared_ptr<const TokenSource> countingTokens(int64_t count) {
  std::vector<uint32_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), 0u);
  return std::make_shared<InMemoryTokens>(std::move(tokens), "counting tokens");
}

TokenDataOptions options(int64_t seq_len, int64_t batch, int64_t rank = 0, int64_t world = 1, uint64_t seed = 5) {
  TokenDataOptions o;
  o.seq_len = seq_len;
  o.batch_size = batch;
  o.rank = rank;
  o.world_size = world;
  o.seed = seed;
  return o;
}

// The windows of the batches of one epoch, read from the tensors, with
// the inputs/targets layout checked on the way.
std::vector<int64_t> readEpoch(TokenDataset& data, int64_t epoch, int64_t first_batch = 0) {
  const int64_t seq = data.options().seq_len;
  std::vector<int64_t> windows;
  data.startEpoch(epoch, first_batch);
  int64_t expected_index = first_batch;
  while (auto batch = data.next()) {
    EXPECT_EQ(batch->index, expected_index++);
    EXPECT_EQ(batch->inputs.dtype(), torch::kLong);
    EXPECT_EQ(batch->inputs.sizes(), (std::vector<int64_t>{batch->rows, seq}));
    EXPECT_TRUE(torch::equal(batch->targets, batch->inputs + 1)) << "targets are the inputs shifted by one";
    for (int64_t r = 0; r < batch->rows; ++r) {
      const int64_t first = batch->inputs[r][0].item<int64_t>();
      EXPECT_EQ(first % seq, 0) << "windows start at multiples of seq_len";
      EXPECT_EQ(batch->inputs[r][seq - 1].item<int64_t>(), first + seq - 1);
      windows.push_back(first / seq);
    }
  }
  EXPECT_EQ(expected_index, data.batchesPerEpoch());
  return windows;
}

TEST(TokenDataset, WindowsStrideBySeqLenSoEveryTokenIsATargetOnce) {
  // 4 windows of 8 + 1 tokens in 35 tokens: 0..8, 8..16, 16..24, 24..32; 33-34 unused.
  TokenDataset data(countingTokens(35), options(8, 1));
  EXPECT_EQ(data.windowCount(), 4);
  std::vector<int64_t> windows = readEpoch(data, 0);
  std::sort(windows.begin(), windows.end());
  EXPECT_EQ(windows, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(TokenDataset(countingTokens(33), options(8, 1)).windowCount(), 4);
  EXPECT_EQ(TokenDataset(countingTokens(32), options(8, 1)).windowCount(), 3);
}

TEST(TokenDataset, EveryWindowOnceAcrossOneTwoAndThreeRanks) {
  const int64_t seq = 4, batch = 2, windows = 36;  // 36 = whole batches for 1, 2 and 3 ranks
  for (int64_t world : {1, 2, 3}) {
    std::vector<int64_t> all;
    for (int64_t rank = 0; rank < world; ++rank) {
      TokenDataset data(countingTokens(windows * seq + 1), options(seq, batch, rank, world));
      EXPECT_EQ(data.batchesPerEpoch(), windows / world / batch);
      const std::vector<int64_t> mine = readEpoch(data, 3);
      EXPECT_EQ(static_cast<int64_t>(mine.size()), windows / world);
      all.insert(all.end(), mine.begin(), mine.end());
    }
    std::sort(all.begin(), all.end());
    std::vector<int64_t> every(windows);
    std::iota(every.begin(), every.end(), 0);
    EXPECT_EQ(all, every) << "world " << world << ": each window exactly once";
  }
}

TEST(TokenDataset, RanksGetEqualCountsAndNoOverlapWhenWindowsDoNotDivide) {
  const int64_t seq = 3, batch = 2;
  TokenDataset probe(countingTokens(41 * seq + 1), options(seq, batch));
  ASSERT_EQ(probe.windowCount(), 41);
  std::set<int64_t> seen;
  for (int64_t rank = 0; rank < 3; ++rank) {
    TokenDataset data(countingTokens(41 * seq + 1), options(seq, batch, rank, 3));
    EXPECT_EQ(data.windowsPerEpoch(), 13);
    EXPECT_EQ(data.batchesPerEpoch(), 6);  // 13 windows: the incomplete 7th batch is dropped
    for (int64_t w : readEpoch(data, 0)) EXPECT_TRUE(seen.insert(w).second) << "window " << w << " read twice";
  }
  EXPECT_EQ(seen.size(), 36u);
}

TEST(TokenDataset, OrderIsAPureFunctionOfSeedAndEpoch) {
  auto source = countingTokens(64 * 2 + 1);
  TokenDataset a(source, options(2, 4, 1, 2, 11));
  TokenDataset b(source, options(2, 4, 1, 2, 11));
  TokenDataset other_seed(source, options(2, 4, 1, 2, 12));
  EXPECT_EQ(readEpoch(a, 0), readEpoch(b, 0));
  EXPECT_EQ(a.windowOrder(4), b.windowOrder(4));
  EXPECT_NE(a.windowOrder(0), a.windowOrder(1));
  EXPECT_NE(a.windowOrder(0), other_seed.windowOrder(0));
  EXPECT_EQ(readEpoch(a, 2), a.windowOrder(2)) << "delivery follows windowOrder";
}

TEST(TokenDataset, ResumingAtBatchKGivesExactlyTheRestOfTheEpoch) {
  TokenDataset data(countingTokens(50 * 4 + 1), options(4, 3, 1, 2));
  const std::vector<int64_t> whole = readEpoch(data, 7);
  ASSERT_EQ(data.batchesPerEpoch(), 8);
  for (int64_t k = 0; k <= data.batchesPerEpoch(); ++k) {
    const std::vector<int64_t> rest = readEpoch(data, 7, k);
    EXPECT_EQ(rest, std::vector<int64_t>(whole.begin() + k * 3, whole.end())) << "resumed at batch " << k;
  }
  EXPECT_THAT(configErrorOf([&] { data.startEpoch(7, 9); }), HasSubstr("first batch is 9; expected 0..8"));
}

TEST(TokenDataset, ValidationReadsEveryWindowOnceInFileOrder) {
  const int64_t seq = 5, windows = 23;
  for (int64_t world : {1, 2, 3}) {
    std::vector<int64_t> all;
    for (int64_t rank = 0; rank < world; ++rank) {
      TokenDataOptions o = options(seq, 4, rank, world);
      o.pass = TokenPass::kValidation;
      TokenDataset data(countingTokens(windows * seq + 1), o);
      const std::vector<int64_t> mine = readEpoch(data, 0);
      EXPECT_EQ(readEpoch(data, 9), mine) << "the epoch does not matter";
      EXPECT_TRUE(std::is_sorted(mine.begin(), mine.end()));
      for (int64_t w : mine) EXPECT_EQ(w % world, rank);
      all.insert(all.end(), mine.begin(), mine.end());
    }
    std::sort(all.begin(), all.end());
    std::vector<int64_t> every(windows);
    std::iota(every.begin(), every.end(), 0);
    EXPECT_EQ(all, every) << "world " << world;
  }
}

TEST(TokenDataset, ValidationKeepsAShortLastBatch) {
  TokenDataOptions o = options(2, 4);
  o.pass = TokenPass::kValidation;
  TokenDataset data(countingTokens(10 * 2 + 1), o);
  data.startEpoch(0);
  std::vector<int64_t> rows;
  while (auto batch = data.next()) rows.push_back(batch->rows);
  EXPECT_EQ(rows, (std::vector<int64_t>{4, 4, 2}));
}

TEST(TokenDataset, ReadsShardFilesAcrossTheirBoundaries) {
  testing::TempDir dir("dtrain-token-dataset");
  std::vector<uint32_t> first(10), second(11);
  std::iota(first.begin(), first.end(), 0u);
  std::iota(second.begin(), second.end(), 10u);
  writeTokenShard(dir / "t_train_000001.bin", first, 50257);
  writeTokenShard(dir / "t_train_000002.bin", second, 100000);
  TokenDataOptions o = options(4, 5);
  o.pass = TokenPass::kValidation;
  TokenDataset data(TokenShardSet::open(dir.path(), "train", 50257), o);
  EXPECT_EQ(data.windowCount(), 5);
  EXPECT_EQ(readEpoch(data, 0), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_THAT(data.describe(), HasSubstr("batches per epoch on rank 0"));
}

TEST(TokenDataset, SyntheticTokensFeedTheSameBatches) {
  auto source = std::make_shared<InMemoryTokens>(syntheticTokens(1000, 512, 3), "synthetic tokens");
  TokenDataset a(source, options(16, 4));
  TokenDataset b(std::make_shared<InMemoryTokens>(syntheticTokens(1000, 512, 3), "synthetic tokens"), options(16, 4));
  a.startEpoch(1, 2);
  b.startEpoch(1, 2);
  auto x = a.next(), y = b.next();
  ASSERT_TRUE(x && y);
  EXPECT_TRUE(torch::equal(x->inputs, y->inputs));
  EXPECT_LT(x->inputs.max().item<int64_t>(), 512);
}

TEST(TokenDataset, RefusesDataAndOptionsThatCannotWork) {
  EXPECT_THAT(configErrorOf([] { TokenDataset d(countingTokens(8), options(8, 1)); }),
              HasSubstr("counting tokens holds 8 tokens; expected at least one window of seq_len + 1 = 9 tokens"));
  EXPECT_THAT(configErrorOf([] { TokenDataset d(countingTokens(5 * 4 + 1), options(4, 2, 0, 3)); }),
              HasSubstr("holds 5 windows of seq_len + 1 = 5 tokens; expected at least world_size 3 x batch_size 2 = 6 windows"));
  EXPECT_THAT(configErrorOf([] { TokenDataset d(countingTokens(100), options(0, 1)); }),
              HasSubstr("seq_len is 0; expected >= 1"));
  EXPECT_THAT(configErrorOf([] { TokenDataset d(countingTokens(100), options(4, 0)); }),
              HasSubstr("batch_size is 0; expected >= 1"));
  EXPECT_THAT(configErrorOf([] { TokenDataset d(countingTokens(100), options(4, 1, 2, 2)); }),
              HasSubstr("rank 2 is not in [0, 2)"));
}

}  // namespace
}  // namespace dtrain::data
