// ChatDataset: packed conversations as batches (rank shares, shuffles by
// seed and epoch, a resume at a batch index, positions only where a row
// holds more than one document).
#include <gtest/gtest.h>

#include <set>

#include "common/error.h"
#include "data/chat_dataset.h"

namespace dtrain::data {
namespace {

// `count` samples of 3..7 tokens (token values name their sample).
std::shared_ptr<const ChatPacking> packedSamples(int count, int64_t seq_len) {
  std::vector<ChatSample> samples;
  for (int s = 0; s < count; ++s) {
    ChatSample sample;
    const int n = 3 + s % 5;
    for (int i = 0; i < n; ++i) sample.tokens.push_back(static_cast<uint32_t>(100 * s + i));
    sample.trained.assign(static_cast<size_t>(n), 0);
    sample.trained.back() = 1;
    samples.push_back(sample);
  }
  return std::make_shared<ChatPacking>(packChatSamples(samples, seq_len, 0));
}

TokenDataOptions chatOptions(int64_t rank, int64_t world, TokenPass pass = TokenPass::kTraining) {
  TokenDataOptions o;
  o.seq_len = 16;
  o.batch_size = 2;
  o.seed = 7;
  o.rank = rank;
  o.world_size = world;
  o.pass = pass;
  return o;
}

std::vector<ChatBatch> epochOf(ChatDataset& d, int64_t epoch, int64_t first = 0) {
  d.startEpoch(epoch, first);
  std::vector<ChatBatch> out;
  while (auto b = d.next()) out.push_back(*b);
  return out;
}

TEST(ChatDatasetTest, ResumingAtABatchGivesTheUninterruptedBatches) {
  const auto rows = packedSamples(60, 16);
  ChatDataset a(rows, chatOptions(0, 1)), b(rows, chatOptions(0, 1));
  const std::vector<ChatBatch> whole = epochOf(a, 2);
  ASSERT_GE(whole.size(), 4u);
  const std::vector<ChatBatch> resumed = epochOf(b, 2, 3);
  ASSERT_EQ(resumed.size(), whole.size() - 3);
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_EQ(resumed[i].index, whole[i + 3].index);
    EXPECT_TRUE(resumed[i].inputs.equal(whole[i + 3].inputs));
    EXPECT_TRUE(resumed[i].targets.equal(whole[i + 3].targets));
    EXPECT_TRUE(resumed[i].positions.equal(whole[i + 3].positions));
  }
  // Another epoch, another order.
  EXPECT_FALSE(epochOf(a, 3).front().inputs.equal(whole.front().inputs));
}

TEST(ChatDatasetTest, RanksTakeDisjointRowsAndCountTheirTrainedTargets) {
  const auto rows = packedSamples(60, 16);
  std::set<int64_t> seen;
  for (int64_t rank = 0; rank < 2; ++rank) {
    ChatDataset d(rows, chatOptions(rank, 2));
    for (const ChatBatch& b : epochOf(d, 0)) {
      EXPECT_EQ(b.trained, b.targets.ne(kIgnoreTarget).sum().item<int64_t>());
      EXPECT_EQ(b.positions.sizes(), b.inputs.sizes());
      for (int64_t r = 0; r < b.rows; ++r) {
        EXPECT_TRUE(seen.insert(b.inputs[r][0].item<int64_t>()).second) << "a row read by two ranks";
      }
    }
  }
  EXPECT_THROW(ChatDataset(rows, [] {
                 TokenDataOptions o = chatOptions(0, 1);
                 o.batch_size = 1000;
                 return o;
               }()),
               ConfigError);
}

TEST(ChatDatasetTest, RowsOfOneDocumentEachCarryNoPositions) {
  std::vector<ChatSample> full(4);
  for (ChatSample& s : full) {
    s.tokens.assign(16, 5);
    s.trained.assign(16, 1);
  }
  ChatDataset d(std::make_shared<ChatPacking>(packChatSamples(full, 16, 0)), chatOptions(0, 1));
  for (const ChatBatch& b : epochOf(d, 0)) {
    EXPECT_FALSE(b.positions.defined());
    EXPECT_EQ(b.trained, 2 * 15);
  }
}

}  // namespace
}  // namespace dtrain::data
