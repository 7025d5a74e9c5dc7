// Language-model shapes, overrides, validation and counts (torch-free).
#include "models/catalog.h"
#include "models/lm_config.h"
#include "models/lm_counts.h"

#include <gtest/gtest.h>

#include "tests/support/text.h"

namespace dtrain::models {
namespace {

using testing::configErrorOf;
using testing::contains;

LanguageModelOverrides tinyGpt2() {
  LanguageModelOverrides o;
  o.layers = 2;
  o.dim = 64;
  o.heads = 4;
  o.seq_len = 64;
  return o;
}

// Published counts: GPT-2 (OpenAI's checkpoints as Hugging Face loads them)
// and Llama 3 / 3.2 (Meta's model cards: 8.03B, 1.24B, 3.21B).
TEST(LmConfigTest, NamedSizesHaveThePublishedParameterCounts) {
  const std::pair<const char*, int64_t> expected[] = {
      {"gpt2", 124'439'808},         {"gpt2-124m", 124'439'808},   {"gpt2-350m", 354'823'168},
      {"gpt2-774m", 774'030'080},    {"gpt2-1.5b", 1'557'611'200}, {"llama", 1'235'814'400},
      {"llama-1b", 1'235'814'400},   {"llama-3b", 3'212'749'824},  {"llama-8b", 8'030'261'248}};
  for (const auto& [name, count] : expected) EXPECT_EQ(parameterCount(namedLanguageModel(name)), count) << name;
}

TEST(LmConfigTest, NamedShapes) {
  struct Shape {
    const char* name;
    int64_t layers, dim, heads, kv_heads, ffn_dim, vocab;
    bool tied;
  };
  const Shape shapes[] = {{"gpt2-124m", 12, 768, 12, 12, 3072, 50257, true},
                          {"gpt2-350m", 24, 1024, 16, 16, 4096, 50257, true},
                          {"gpt2-774m", 36, 1280, 20, 20, 5120, 50257, true},
                          {"gpt2-1.5b", 48, 1600, 25, 25, 6400, 50257, true},
                          {"llama-1b", 16, 2048, 32, 8, 8192, 128256, true},
                          {"llama-3b", 28, 3072, 24, 8, 8192, 128256, true},
                          {"llama-8b", 32, 4096, 32, 8, 14336, 128256, false}};
  for (const Shape& s : shapes) {
    SCOPED_TRACE(s.name);
    const LanguageModelConfig c = namedLanguageModel(s.name);
    EXPECT_EQ(c.name, s.name);
    EXPECT_EQ(c.layers, s.layers);
    EXPECT_EQ(c.dim, s.dim);
    EXPECT_EQ(c.heads, s.heads);
    EXPECT_EQ(c.kv_heads, s.kv_heads);
    EXPECT_EQ(c.ffn_dim, s.ffn_dim);
    EXPECT_EQ(c.vocab_size, s.vocab);
    EXPECT_EQ(c.tie_embeddings, s.tied);
  }
  const LanguageModelConfig gpt2 = namedLanguageModel("gpt2");
  EXPECT_EQ(gpt2.family, LmFamily::kGpt2);
  EXPECT_EQ(gpt2.max_seq_len, 1024);
  const LanguageModelConfig llama = namedLanguageModel("llama");
  EXPECT_EQ(llama.family, LmFamily::kLlama);
  EXPECT_EQ(llama.rope_theta, 500000);
  EXPECT_EQ(llama.norm_eps, 1e-5);
}

TEST(LmConfigTest, EveryCatalogNameResolves) {
  for (const auto& name : languageModelNames()) {
    EXPECT_TRUE(isLanguageModelName(name)) << name;
    EXPECT_NO_THROW(namedLanguageModel(name)) << name;
  }
  EXPECT_FALSE(isLanguageModelName("resnet18"));
  EXPECT_EQ(namedLanguageModel("llama").name, "llama-1b");
}

TEST(LmConfigTest, PaddedVocabularyAddsItsRows) {
  LanguageModelOverrides o;
  o.vocab_size = 50304;  // llm.c's padding to a multiple of 128
  EXPECT_EQ(parameterCount(namedLanguageModel("gpt2", o)), 124'439'808 + (50304 - 50257) * 768);
}

TEST(LmConfigTest, TinyOverridesDeriveTheMlpWidth) {
  const LanguageModelConfig gpt2 = namedLanguageModel("gpt2", tinyGpt2());
  EXPECT_EQ(gpt2.layers, 2);
  EXPECT_EQ(gpt2.dim, 64);
  EXPECT_EQ(gpt2.heads, 4);
  EXPECT_EQ(gpt2.kv_heads, 4);
  EXPECT_EQ(gpt2.ffn_dim, 256);
  EXPECT_EQ(gpt2.seq_len, 64);
  EXPECT_EQ(gpt2.max_seq_len, 1024);  // the learned positions stay GPT-2's
  EXPECT_EQ(gpt2.name, "gpt2") << "a 2-layer model is no gpt2-124m";

  LanguageModelOverrides o;
  o.dim = 64;
  o.heads = 4;
  o.kv_heads = 2;
  const LanguageModelConfig llama = namedLanguageModel("llama", o);
  EXPECT_EQ(llama.ffn_dim, 256);  // 8/3 x 64 = 170.7, rounded up to 256
  o.ffn_dim = 96;
  EXPECT_EQ(namedLanguageModel("llama", o).ffn_dim, 96);
  // The same dim as the named size keeps its MLP width.
  LanguageModelOverrides same;
  same.dim = 4096;
  EXPECT_EQ(namedLanguageModel("llama-8b", same).ffn_dim, 14336);
  EXPECT_EQ(namedLanguageModel("llama-8b", same).name, "llama-8b") << "the named size's own dimensions";
  EXPECT_EQ(llama.name, "llama");
  LanguageModelOverrides longer;
  longer.seq_len = 512;
  EXPECT_EQ(namedLanguageModel("gpt2-124m", longer).name, "gpt2-124m") << "--seq-len trains the same weights";
}

TEST(LmConfigTest, TieEmbeddingsOverride) {
  LanguageModelOverrides untie;
  untie.tie_embeddings = false;
  EXPECT_EQ(parameterCount(namedLanguageModel("llama-1b", untie)), 1'235'814'400 + 128256LL * 2048);
  LanguageModelOverrides tie;
  tie.tie_embeddings = true;
  EXPECT_EQ(parameterCount(namedLanguageModel("llama-8b", tie)), 8'030'261'248 - 128256LL * 4096);
  EXPECT_EQ(parameterCount(namedLanguageModel("gpt2", untie)), 124'439'808 + 50257LL * 768);
}

TEST(LmConfigTest, LlamaSequenceLongerThanItsTableRaisesIt) {
  LanguageModelOverrides o;
  o.seq_len = 16384;
  EXPECT_EQ(namedLanguageModel("llama-8b", o).max_seq_len, 16384);
}

// 6 N + 12 L d T with N the matmul parameters (nanoGPT's estimate_mfu for
// GPT-2, torchtitan's for Llama).
TEST(LmConfigTest, TrainingFlopsPerToken) {
  const LanguageModelConfig gpt2 = namedLanguageModel("gpt2");
  EXPECT_EQ(flopParameterCount(gpt2), 124'439'808 - 1024 * 768);
  EXPECT_DOUBLE_EQ(trainingFlopsPerToken(gpt2, 1024), 6.0 * (124'439'808 - 1024 * 768) + 12.0 * 12 * 768 * 1024);
  const LanguageModelConfig llama8b = namedLanguageModel("llama-8b");
  EXPECT_EQ(flopParameterCount(llama8b), 8'030'261'248 - 128256LL * 4096);
  EXPECT_DOUBLE_EQ(trainingFlopsPerToken(llama8b, 8192),
                   6.0 * (8'030'261'248 - 128256.0 * 4096) + 12.0 * 32 * 4096 * 8192);
  // A tied head does the output matmul: the embedding counts.
  EXPECT_EQ(flopParameterCount(namedLanguageModel("llama-1b")), 1'235'814'400);
  // FP8's share: the blocks' matrices, not attention's products or the head.
  const double llama_blocks = 32.0 * (2 * 4096.0 * 4096 + 2 * 4096.0 * 1024 + 3 * 4096.0 * 14336);
  EXPECT_DOUBLE_EQ(fp8FlopShare(llama8b, 2048), 6 * llama_blocks / trainingFlopsPerToken(llama8b, 2048));
  EXPECT_NEAR(fp8FlopShare(llama8b, 2048), 0.85, 0.02);
  EXPECT_DOUBLE_EQ(fp8FlopShare(gpt2, 1024), 6 * 12.0 * (4 * 768.0 * 768 + 2 * 768.0 * 3072) /
                                                 trainingFlopsPerToken(gpt2, 1024));
}

TEST(LmConfigTest, UnknownModelListsTheValidNames) {
  const std::string msg = configErrorOf([] { namedLanguageModel("gpt3"); });
  EXPECT_TRUE(contains(msg, "unknown language model 'gpt3'")) << msg;
  for (const auto& name : languageModelNames()) EXPECT_TRUE(contains(msg, name)) << msg;
}

TEST(LmConfigTest, BadShapesNameTheOption) {
  auto with = [](auto set) {
    LanguageModelOverrides o = tinyGpt2();
    set(o);
    return o;
  };
  EXPECT_TRUE(contains(configErrorOf([&] { namedLanguageModel("gpt2", with([](auto& o) { o.heads = 5; })); }),
                       "--heads 5 must divide --dim 64"));
  EXPECT_TRUE(contains(configErrorOf([&] { namedLanguageModel("gpt2", with([](auto& o) { o.seq_len = 2048; })); }),
                       "--seq-len 2048 exceeds the model's 1024 positions"));
  EXPECT_TRUE(contains(configErrorOf([&] { namedLanguageModel("gpt2", with([](auto& o) { o.layers = 0; })); }),
                       "--layers must be a positive whole number, got 0"));
  EXPECT_TRUE(contains(configErrorOf([&] { namedLanguageModel("gpt2", with([](auto& o) { o.vocab_size = -1; })); }),
                       "--vocab-size must be a positive whole number, got -1"));
  EXPECT_TRUE(contains(configErrorOf([&] { namedLanguageModel("gpt2", with([](auto& o) { o.kv_heads = 2; })); }),
                       "--kv-heads applies to llama models only"));
  EXPECT_TRUE(contains(configErrorOf([&] { namedLanguageModel("gpt2", with([](auto& o) { o.rope_theta = 1e4; })); }),
                       "--rope-theta applies to llama models only"));
  EXPECT_TRUE(contains(configErrorOf([&] { namedLanguageModel("llama", with([](auto& o) { o.kv_heads = 3; })); }),
                       "--kv-heads 3 must divide --heads 4"));
  EXPECT_TRUE(contains(configErrorOf([&] {
                         namedLanguageModel("llama", with([](auto& o) {
                           o.dim = 60;
                           o.heads = 4;
                           o.kv_heads = 4;
                         }));
                       }),
                       "rotary embeddings need an even head dim (--dim / --heads), got 60 / 4 = 15"));
  EXPECT_TRUE(contains(configErrorOf([&] { namedLanguageModel("llama", with([](auto& o) {
                                             o.kv_heads = 4;
                                             o.rope_theta = 0;
                                           })); }),
                       "--rope-theta must be positive"));
}

TEST(LmConfigTest, MetadataRoundTrips) {
  LanguageModelOverrides o;
  o.layers = 3;
  o.dim = 96;
  o.heads = 6;
  o.kv_heads = 2;
  o.rope_theta = 10000.5;
  o.tie_embeddings = false;
  const LanguageModelConfig c = namedLanguageModel("llama-3b", o);
  const LanguageModelConfig back = languageModelFromMetadata(languageModelMetadata(c));
  EXPECT_EQ(back.name, c.name);
  EXPECT_EQ(back.family, c.family);
  EXPECT_EQ(back.layers, 3);
  EXPECT_EQ(back.dim, 96);
  EXPECT_EQ(back.kv_heads, 2);
  EXPECT_EQ(back.ffn_dim, c.ffn_dim);
  EXPECT_EQ(back.max_seq_len, c.max_seq_len);
  EXPECT_EQ(back.tie_embeddings, false);
  EXPECT_EQ(back.rope_theta, 10000.5);
  EXPECT_EQ(back.norm_eps, c.norm_eps);
}

TEST(LmConfigTest, MalformedMetadataNamesTheKey) {
  auto metadata = languageModelMetadata(namedLanguageModel("gpt2"));
  metadata["layers"] = "12x";
  EXPECT_TRUE(contains(configErrorOf([&] { languageModelFromMetadata(metadata); }),
                       "metadata 'layers' is '12x'; expected a whole number"));
  metadata.erase("layers");
  EXPECT_TRUE(contains(configErrorOf([&] { languageModelFromMetadata(metadata); }), "lacks the key 'layers'"));
}

}  // namespace
}  // namespace dtrain::models
