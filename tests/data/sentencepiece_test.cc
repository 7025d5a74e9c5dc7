// SentencePiece: a tiny model trained here on a few KB of text, then used
// as a Tokenizer. In a build without libsentencepiece, the error that says so.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/sentencepiece_tokenizer.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::data {
namespace {

using testing::configErrorOf;
using testing::contains;

std::string trainingText() {
  std::string text;
  const char* const lines[] = {
      "The quick brown fox jumps over the lazy dog.", "A journey of a thousand miles begins with a single step.",
      "To be or not to be, that is the question.", "All that glitters is not gold; all who wander are not lost.",
      "Numbers like 12345 and 2024 appear in text too.", "Über café naïve — unicode appears as well: 你好 世界.",
  };
  for (int round = 0; round < 40; ++round) {
    for (const char* line : lines) text += std::string(line) + " (" + std::to_string(round) + ")\n";
  }
  return text;
}

TEST(SentencePiece, TrainsAModelThatRoundTrips) {
  if (!haveSentencePiece()) GTEST_SKIP() << "this build has no SentencePiece";
  testing::TempDir dir("spm");
  testing::writeFile(dir / "corpus.txt", trainingText());
  SentencePieceTraining training;
  training.model_prefix = dir / "tiny";
  training.vocab_size = 400;
  trainSentencePiece(training, {dir / "corpus.txt"});

  auto tokenizer = makeTokenizer("sentencepiece", dir / "tiny.model");
  EXPECT_EQ(tokenizer->name(), "sentencepiece");
  EXPECT_EQ(tokenizer->vocabSize(), 400);
  EXPECT_EQ(tokenizer->eotToken(), 2u);  // </s>
  for (const std::string text : {"The quick brown fox.", "  two  spaces and\ttabs\nnewline", "never seen: ℵ Ω 🎉",
                                 "digits 9876543210", "<|endoftext|> is plain text"}) {
    const std::vector<uint32_t> ids = tokenizer->encode(text);
    EXPECT_FALSE(ids.empty());
    for (uint32_t id : ids) EXPECT_NE(id, tokenizer->eotToken()) << text;
    EXPECT_EQ(tokenizer->decode(ids), text);
  }
  std::vector<uint32_t> joined = tokenizer->encode("one");
  joined.push_back(tokenizer->eotToken());
  const std::vector<uint32_t> two = tokenizer->encode("two");
  joined.insert(joined.end(), two.begin(), two.end());
  EXPECT_EQ(tokenizer->decode(joined), "one<|endoftext|>two");
  EXPECT_TRUE(contains(configErrorOf([&] { tokenizer->decode({400}); }), "token id 400"));
}

TEST(SentencePiece, BadInputIsNamed) {
  testing::TempDir dir("spm");
  std::string error = configErrorOf([&] { makeTokenizer("sentencepiece", dir / "missing.model"); });
  EXPECT_TRUE(contains(error, dir / "missing.model")) << error;
  if (!haveSentencePiece()) {
    EXPECT_TRUE(contains(error, "built without SentencePiece")) << error;
    return;
  }
  testing::writeFile(dir / "junk.model", "not a model");
  error = configErrorOf([&] { makeTokenizer("sentencepiece", dir / "junk.model"); });
  EXPECT_TRUE(contains(error, dir / "junk.model")) << error;
  testing::writeFile(dir / "small.txt", "just a few words\n");
  SentencePieceTraining training;
  training.model_prefix = dir / "small";
  training.vocab_size = 5000;
  error = configErrorOf([&] { trainSentencePiece(training, {dir / "small.txt"}); });
  EXPECT_TRUE(contains(error, "SentencePiece training")) << error;
  testing::writeFile(dir / "latin1.txt", "caf\xE9\n");
  error = configErrorOf([&] { trainSentencePiece(training, {dir / "latin1.txt"}); });
  EXPECT_TRUE(contains(error, "byte offset 3")) << error;
}

}  // namespace
}  // namespace dtrain::data
