// The GPT-2 vocabulary files (OpenAI's names and Hugging Face's) and the
// merge loop, on a small vocabulary made here: what loads, what is refused
// (naming the directory, file and line), and merges applied in encoder.py's
// order.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/bpe_merges.h"
#include "data/gpt2_tokenizer.h"
#include "data/gpt2_vocabulary.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::data {
namespace {

using testing::configErrorOf;
using testing::contains;

// A token's bytes written in GPT-2's byte alphabet, as encoder.json has it.
std::string written(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    const char32_t cp = gpt2ByteAlphabet()[b];
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

// 256 byte tokens, then the merges' results, then <|endoftext|>.
void writeVocabulary(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& merges) {
  nlohmann::json encoder = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) encoder[written(std::string(1, static_cast<char>(b)))] = b;
  std::string bpe = "#version: 0.2\n";
  for (const auto& [left, right] : merges) {
    if (!encoder.contains(written(left + right))) encoder[written(left + right)] = encoder.size();
    bpe += written(left) + " " + written(right) + "\n";
  }
  encoder["<|endoftext|>"] = encoder.size();
  testing::writeFile(dir + "/encoder.json", encoder.dump());
  testing::writeFile(dir + "/vocab.bpe", bpe);
}

TEST(Gpt2Vocabulary, TheAlphabetMapsPrintableBytesToThemselves) {
  EXPECT_EQ(gpt2ByteAlphabet()['A'], U'A');
  EXPECT_EQ(gpt2ByteAlphabet()[' '], U'Ġ');   // 256 + 32
  EXPECT_EQ(gpt2ByteAlphabet()['\n'], U'Ċ');  // 256 + 10
  std::string bytes;
  EXPECT_TRUE(gpt2TokenBytes("ĠHello", bytes));
  EXPECT_EQ(bytes, " Hello");
  EXPECT_FALSE(gpt2TokenBytes("a b", bytes));  // a space is not in the alphabet
}

TEST(Gpt2Vocabulary, MergesApplyByRank) {
  testing::TempDir dir("gpt2-vocab");
  writeVocabulary(dir.path(), {{" ", "t"}, {"h", "e"}, {" t", "he"}, {"a", "a"}, {"aa", "a"}});
  Gpt2Tokenizer tokenizer(dir.path());
  EXPECT_EQ(tokenizer.vocabSize(), 256 + 5 + 1);
  EXPECT_EQ(tokenizer.eotToken(), 261u);
  EXPECT_EQ(tokenizer.encode(" the"), (std::vector<uint32_t>{258}));
  EXPECT_EQ(tokenizer.encode("the"), (std::vector<uint32_t>{'t', 257}));
  // "aaaa": (a,a) merges twice, left to right, then (aa,a) finds no a left.
  EXPECT_EQ(tokenizer.encode("aaaa"), (std::vector<uint32_t>{259, 259}));
  EXPECT_EQ(tokenizer.encode("aaa"), (std::vector<uint32_t>{260}));
  EXPECT_EQ(tokenizer.encode("aaaaa"), (std::vector<uint32_t>{259, 260}));
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(" the aaaaa")), " the aaaaa");
}

TEST(BpeMerges, OnePassMergesEveryOccurrenceBeforeLaterRanks) {
  // ids: a=1 b=2 c=3; (a,b)->4 rank 0, (b,c)->5 rank 1, (4,3)->6 rank 2.
  BpeMerges merges;
  merges.add(1, 2, 4);
  merges.add(2, 3, 5);
  merges.add(4, 3, 6);
  std::vector<uint32_t> symbols{1, 2, 3, 1, 2, 1, 2, 3};
  merges.apply(symbols);
  EXPECT_EQ(symbols, (std::vector<uint32_t>{6, 4, 6}));
  std::vector<uint32_t> lone{2, 3};
  merges.apply(lone);
  EXPECT_EQ(lone, (std::vector<uint32_t>{5}));
}

TEST(BpeMerges, ALongPieceWithoutMergesIsQuick) {
  BpeMerges merges;
  merges.add(1, 2, 3);
  std::vector<uint32_t> symbols;
  for (int i = 0; i < 200'000; ++i) symbols.push_back(static_cast<uint32_t>(1 + (i % 2)));
  merges.apply(symbols);
  EXPECT_EQ(symbols.size(), 100'000u);
}

TEST(Gpt2Vocabulary, MissingFilesAreNamedWithTheirDirectory) {
  testing::TempDir dir("gpt2-vocab");
  writeVocabulary(dir.path(), {});
  ASSERT_EQ(::unlink((dir / "vocab.bpe").c_str()), 0);
  std::string error = configErrorOf([&] { Gpt2Tokenizer tokenizer(dir.path()); });
  EXPECT_TRUE(contains(error, dir.path())) << error;
  EXPECT_TRUE(contains(error, "has no vocab.bpe")) << error;
  ASSERT_EQ(::unlink((dir / "encoder.json").c_str()), 0);
  error = configErrorOf([&] { Gpt2Tokenizer tokenizer(dir.path()); });
  EXPECT_TRUE(contains(error, "has no encoder.json")) << error;
  error = configErrorOf([&] { Gpt2Tokenizer tokenizer(dir / "nowhere"); });
  EXPECT_TRUE(contains(error, dir / "nowhere")) << error;
  EXPECT_TRUE(contains(error, "does not exist")) << error;
}

TEST(Gpt2Vocabulary, HuggingFacesVocabJsonAndMergesTxtAreTheSameFiles) {
  testing::TempDir dir("gpt2-vocab");
  writeVocabulary(dir.path(), {{" ", "t"}, {"h", "e"}, {" t", "he"}});
  const std::vector<uint32_t> ids = Gpt2Tokenizer(dir.path()).encode(" the then");
  ASSERT_EQ(::rename((dir / "encoder.json").c_str(), (dir / "vocab.json").c_str()), 0);
  ASSERT_EQ(::rename((dir / "vocab.bpe").c_str(), (dir / "merges.txt").c_str()), 0);
  EXPECT_EQ(Gpt2Tokenizer(dir.path()).encode(" the then"), ids);
  testing::writeFile(dir / "merges.txt", "#version: 0.2\nx y\n");
  std::string error = configErrorOf([&] { Gpt2Tokenizer tokenizer(dir.path()); });
  EXPECT_TRUE(contains(error, "merges.txt line 2")) << error;
  EXPECT_TRUE(contains(error, "not in vocab.json")) << error;
  ASSERT_EQ(::unlink((dir / "merges.txt").c_str()), 0);
  error = configErrorOf([&] { Gpt2Tokenizer tokenizer(dir.path()); });
  EXPECT_TRUE(contains(error, dir.path() + " has no merges.txt")) << error;
}

TEST(Gpt2Vocabulary, MalformedFilesAreNamedWithTheLine) {
  testing::TempDir dir("gpt2-vocab");
  writeVocabulary(dir.path(), {{"a", "b"}});
  testing::writeFile(dir / "vocab.bpe", "#version: 0.2\na b\nab\n");
  std::string error = configErrorOf([&] { Gpt2Tokenizer tokenizer(dir.path()); });
  EXPECT_TRUE(contains(error, "vocab.bpe line 3")) << error;
  testing::writeFile(dir / "vocab.bpe", "#version: 0.2\nx y\n");
  error = configErrorOf([&] { Gpt2Tokenizer tokenizer(dir.path()); });
  EXPECT_TRUE(contains(error, "line 2")) << error;
  EXPECT_TRUE(contains(error, "not in encoder.json")) << error;
  testing::writeFile(dir / "encoder.json", "{\"a\": 0,");
  error = configErrorOf([&] { Gpt2Tokenizer tokenizer(dir.path()); });
  EXPECT_TRUE(contains(error, "encoder.json: not valid JSON")) << error;
  testing::writeFile(dir / "encoder.json", "{\"a\": 0}");
  error = configErrorOf([&] { Gpt2Tokenizer tokenizer(dir.path()); });
  EXPECT_TRUE(contains(error, "has no <|endoftext|>")) << error;
}

}  // namespace
}  // namespace dtrain::data
