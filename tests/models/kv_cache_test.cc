// Cached decoding (models/kv_cache.h, LanguageModel::forwardCached): the
// logits of a prompt and then one token at a time equal the full
// forward's at every position, for gpt2 and llama (grouped-query attention
// included); the cache's bounds and bad input.
#include "common/error.h"
#include "models/cached_attention.h"
#include "models/kv_cache.h"
#include "models/language_model.h"
#include "models/transformer_ops.h"

#include <gtest/gtest.h>

#include "tests/models/tensor_compare.h"
#include "tests/support/text.h"

namespace dtrain::models {
namespace {

using testing::configErrorOf;
using testing::contains;

LanguageModelConfig tinyCached(const std::string& family, int64_t kv_heads, bool tied) {
  LanguageModelOverrides o;
  o.layers = 2;
  o.dim = 32;
  o.heads = 4;
  if (family == "llama") o.kv_heads = kv_heads;
  o.seq_len = 24;
  o.vocab_size = 50;
  o.tie_embeddings = tied;
  return namedLanguageModel(family, o);
}

// Logits of `tokens` [B, T] through the cache: the first `prompt` tokens
// in one chunk, then `step` tokens per call.
torch::Tensor cachedLogits(LanguageModel& lm, const torch::Tensor& tokens, int64_t prompt, int64_t step) {
  KvCache cache(lm.config(), tokens.size(0), tokens.size(1));
  std::vector<torch::Tensor> chunks = {lm.forwardCached(tokens.narrow(1, 0, prompt), cache)};
  for (int64_t at = prompt; at < tokens.size(1); at += step) {
    const int64_t t = std::min(step, tokens.size(1) - at);
    chunks.push_back(lm.forwardCached(tokens.narrow(1, at, t), cache));
  }
  EXPECT_EQ(cache.length(), tokens.size(1));
  return torch::cat(chunks, 1);
}

struct CacheCase {
  std::string family;
  int64_t kv_heads;
  bool tied;
};

class KvCacheEquivalence : public ::testing::TestWithParam<CacheCase> {};

TEST_P(KvCacheEquivalence, PromptThenTokenByTokenEqualsTheFullForward) {
  const CacheCase c = GetParam();
  torch::manual_seed(3);
  auto lm = createLanguageModel(tinyCached(c.family, c.kv_heads, c.tied));
  lm->eval();
  const torch::Tensor tokens = torch::randint(50, {2, 20});
  torch::Tensor full;
  {
    torch::NoGradGuard no_grad;
    full = lm->forward(tokens);
  }
  for (int64_t step : {1, 3}) {
    const torch::Tensor cached = cachedLogits(*lm, tokens, /*prompt=*/7, step);
    ASSERT_EQ(cached.sizes(), full.sizes());
    EXPECT_LT(maxRelativeError(cached, full), 1e-5) << c.family << " kv_heads " << c.kv_heads << " step " << step;
  }
  // A prompt of one token, then one at a time.
  EXPECT_LT(maxRelativeError(cachedLogits(*lm, tokens, 1, 1), full), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Families, KvCacheEquivalence,
                         ::testing::Values(CacheCase{"gpt2", 4, true}, CacheCase{"gpt2", 4, false}, CacheCase{"llama", 4, true},
                                           CacheCase{"llama", 2, false}, CacheCase{"llama", 1, true}),
                         [](const ::testing::TestParamInfo<CacheCase>& info) {
                           return info.param.family + "_kv" + std::to_string(info.param.kv_heads) +
                                  (info.param.tied ? "_tied" : "_untied");
                         });

TEST(CachedAttentionTest, WholeSequenceIsCausalAttention) {
  torch::manual_seed(1);
  const torch::Tensor q = torch::randn({2, 4, 9, 8});
  const torch::Tensor k = torch::randn({2, 2, 9, 8});
  const torch::Tensor v = torch::randn({2, 2, 9, 8});
  EXPECT_LT(maxRelativeError(ops::cachedAttention(q, k, v, 0), ops::causalAttention(q, k, v)), 1e-5);
  // The last three queries over all nine keys are the last three rows.
  const torch::Tensor tail = ops::cachedAttention(q.narrow(2, 6, 3), k, v, 6);
  EXPECT_LT(maxRelativeError(tail, ops::causalAttention(q, k, v).narrow(2, 6, 3)), 1e-5);
}

TEST(KvCacheTest, ShapesAndLength) {
  const LanguageModelConfig c = tinyCached("llama", 2, true);
  KvCache cache(c, 3, 10, torch::TensorOptions().dtype(torch::kBFloat16));
  EXPECT_EQ(cache.blocks(), c.layers);
  EXPECT_EQ(cache.length(), 0);
  KvSlot slot = cache.slot(0);
  const auto [keys, values] = slot.append(torch::ones({3, 2, 4, c.headDim()}), torch::ones({3, 2, 4, c.headDim()}));
  EXPECT_EQ(keys.sizes(), (std::vector<int64_t>{3, 2, 4, c.headDim()}));
  EXPECT_EQ(values.scalar_type(), torch::kBFloat16);
  cache.advance(4);
  EXPECT_EQ(cache.length(), 4);
  EXPECT_EQ(cache.slot(1).offset(), 4);
  cache.clear();
  EXPECT_EQ(cache.length(), 0);
}

TEST(KvCacheTest, BadInputNamesWhatWasExpected) {
  torch::manual_seed(0);
  auto lm = createLanguageModel(tinyCached("gpt2", 4, true));
  EXPECT_TRUE(contains(configErrorOf([&] { KvCache(lm->config(), 0, 4); }), "at least 1"));
  KvCache cache(lm->config(), 1, 4);
  EXPECT_TRUE(contains(configErrorOf([&] { lm->forwardCached(torch::zeros({1, 5}, torch::kLong), cache); }),
                       "capacity of 4"));
  EXPECT_TRUE(contains(configErrorOf([&] { lm->forwardCached(torch::zeros({2, 1}, torch::kLong), cache); }),
                       "batch 1"));
  EXPECT_TRUE(contains(configErrorOf([&] { lm->forwardCached(torch::zeros({1, 2}), cache); }), "int64"));
  EXPECT_TRUE(contains(configErrorOf([&] { cache.slot(7); }), "no block 7"));
  EXPECT_EQ(cache.length(), 0);  // nothing was appended by the refused calls
  // Past the model's positions even when the cache is larger.
  KvCache big(lm->config(), 1, lm->config().max_seq_len + 1);
  EXPECT_TRUE(contains(
      configErrorOf([&] { lm->forwardCached(torch::zeros({1, lm->config().max_seq_len + 1}, torch::kLong), big); }),
      "positions"));
}

}  // namespace
}  // namespace dtrain::models
