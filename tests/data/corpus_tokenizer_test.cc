// Text files to token shards (data/corpus_tokenizer.h) with the byte
// tokenizer, whose ids are the bytes: documents, the end-of-text before each,
// the validation split, shard sizes, thread counts, and refused input; a
// Llama-3-style tokenizer's documents between its begin- and end-of-text;
// the file naming the shards' tokenizer (data/shard_tokenizer.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "data/byte_tokenizer.h"
#include "data/corpus_tokenizer.h"
#include "data/document_split.h"
#include "data/hf_tokenizer.h"
#include "data/shard_tokenizer.h"
#include "data/token_shard.h"
#include "tests/data/hf_tokenizer_files.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::data {
namespace {

using testing::configErrorOf;
using testing::contains;
using Mode = DocumentSplit::Mode;

std::vector<std::string> split(std::string_view text, Mode mode, std::string separator = "") {
  std::vector<std::string_view> documents;
  splitDocuments(text, DocumentSplit{mode, std::move(separator)}, documents);
  return {documents.begin(), documents.end()};
}

using Docs = std::vector<std::string>;

TEST(DocumentSplit, WholeFileBlankLinesAndSeparators) {
  EXPECT_EQ(split("one\n\ntwo\n", Mode::kWholeFile), (Docs{"one\n\ntwo\n"}));
  EXPECT_EQ(split("  \n\t\n", Mode::kWholeFile), Docs{});
  EXPECT_EQ(split("one\nstill one\n\n \t\ntwo\r\n\r\nthree", Mode::kBlankLines),
            (Docs{"one\nstill one\n", "two\r\n", "three"}));
  EXPECT_EQ(split("\n\nfirst\n", Mode::kBlankLines), (Docs{"first\n"}));
  EXPECT_EQ(split("A fortune.\n%\nAnother\n  -- someone\n%\n%\nLast\n%\n", Mode::kSeparatorLine, "%"),
            (Docs{"A fortune.\n", "Another\n  -- someone\n", "Last\n"}));
  EXPECT_EQ(split("a\r\n%\r\nb\r\n", Mode::kSeparatorLine, "%"), (Docs{"a\r\n", "b\r\n"}));
  EXPECT_EQ(split("100%\n% \nx\n", Mode::kSeparatorLine, "%"), (Docs{"100%\n% \nx\n"}));
}

// All tokens of the shards, in order.
std::vector<uint32_t> shardTokens(const std::vector<WrittenShard>& shards) {
  std::vector<uint32_t> tokens;
  for (const WrittenShard& written : shards) {
    TokenShard shard(written.path, 257);
    EXPECT_EQ(shard.size(), written.tokens);
    EXPECT_EQ(shard.version(), kTokenShardVersionUint16);
    for (int64_t i = 0; i < shard.size(); ++i) tokens.push_back(shard.token(i));
  }
  return tokens;
}

std::vector<uint32_t> withEot(std::initializer_list<std::string_view> documents) {
  std::vector<uint32_t> tokens;
  for (std::string_view document : documents) {
    tokens.push_back(ByteTokenizer::kEndOfText);
    for (unsigned char c : document) tokens.push_back(c);
  }
  return tokens;
}

class CorpusTest : public ::testing::Test {
 protected:
  CorpusSummary run(const std::vector<std::string>& files, CorpusOptions options) {
    options.out_dir = dir_ / ("out" + std::to_string(runs_++));
    return tokenizeCorpus(files, tokenizer_, options, {});
  }
  std::string file(const std::string& name, std::string_view bytes) {
    testing::writeFile(dir_ / name, bytes);
    return dir_ / name;
  }
  testing::TempDir dir_{"corpus"};
  ByteTokenizer tokenizer_;
  int runs_ = 0;
};

TEST_F(CorpusTest, EachDocumentFollowsAnEndOfText) {
  const std::string a = file("a.txt", "A fortune.\n%\nAnother.\n"), b = file("b.txt", "Third.\n");
  CorpusOptions options;
  options.split = {Mode::kSeparatorLine, "%"};
  const CorpusSummary summary = run({a, b}, options);
  EXPECT_EQ(summary.files, 2);
  EXPECT_EQ(summary.documents, 3);
  ASSERT_EQ(summary.shards.size(), 1u);
  EXPECT_TRUE(summary.shards[0].path.ends_with("/tokens_train_000000.bin")) << summary.shards[0].path;
  EXPECT_EQ(shardTokens(summary.shards), withEot({"A fortune.\n", "Another.\n", "Third.\n"}));
}

TEST_F(CorpusTest, ValidationComesFirstAndShardsAreFilled) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += "document number " + std::to_string(i) + "\n\n";
  const std::string path = file("docs.txt", text);
  CorpusOptions options;
  options.split = {Mode::kBlankLines, ""};
  options.val_fraction = 0.1;
  options.shard_tokens = 500;
  options.name = "docs";
  const CorpusSummary summary = run({path}, options);
  EXPECT_EQ(summary.documents, 100);
  // The documents that start in the first 10% (199 of 1990 bytes).
  EXPECT_EQ(summary.validation_documents, 11);
  ASSERT_EQ(summary.shards.size(), 5u);  // 209 validation tokens, then 500 + 500 + 500 + 280
  EXPECT_TRUE(summary.shards[0].path.ends_with("/docs_val_000000.bin"));
  EXPECT_TRUE(summary.shards[0].validation);
  EXPECT_EQ(summary.shards[0].tokens, summary.validation_tokens);
  EXPECT_TRUE(summary.shards[1].path.ends_with("/docs_train_000001.bin"));
  EXPECT_EQ(summary.shards[1].tokens, 500);
  // Each document: an end-of-text and its bytes, less the blank line after it.
  EXPECT_EQ(summary.tokens, summary.documents + static_cast<int64_t>(text.size()) - 100);
  std::vector<uint32_t> all = shardTokens(summary.shards);
  EXPECT_EQ(static_cast<int64_t>(all.size()), summary.tokens);
}

TEST_F(CorpusTest, ShardsDoNotDependOnTheThreadCount) {
  std::vector<std::string> files;
  size_t expected_tokens = 0;
  for (int f = 0; f < 5; ++f) {
    std::string text;
    for (int i = 0; i < 3000; ++i) {
      const std::string document = "file " + std::to_string(f) + " line " + std::to_string(i) + "\n";
      text += document + "%\n";
      expected_tokens += 1 + document.size();
    }
    files.push_back(file("f" + std::to_string(f) + ".txt", text));
  }
  CorpusOptions options;
  options.split = {Mode::kSeparatorLine, "%"};
  options.shard_tokens = 100'000;
  options.val_fraction = 0.05;
  options.threads = 1;
  const auto one = shardTokens(run(files, options).shards);
  options.threads = 4;
  const auto four = shardTokens(run(files, options).shards);
  EXPECT_EQ(one.size(), expected_tokens);
  EXPECT_EQ(one, four);
}

TEST_F(CorpusTest, BadInputIsNamedAndNothingIsWritten) {
  const std::string good = file("good.txt", "fine text\n"), latin1 = file("latin1.txt", "ok\ncaf\xE9\n");
  std::string error = configErrorOf([&] { run({good, latin1}, {}); });
  EXPECT_TRUE(contains(error, latin1)) << error;
  EXPECT_TRUE(contains(error, "byte offset 6")) << error;
  EXPECT_FALSE(testing::pathExists(dir_ / "out0/tokens_train_000000.bin"));

  error = configErrorOf([&] { run({good, dir_ / "missing.txt"}, {}); });
  EXPECT_TRUE(contains(error, dir_ / "missing.txt")) << error;
  error = configErrorOf([&] { run({dir_.path()}, {}); });
  EXPECT_TRUE(contains(error, "is a directory")) << error;
  error = configErrorOf([&] { run({file("blank.txt", "\n \n")}, {}); });
  EXPECT_TRUE(contains(error, "no text")) << error;

  CorpusOptions validation;
  validation.val_fraction = 0.5;
  error = configErrorOf([&] { run({good}, validation); });
  EXPECT_TRUE(contains(error, "leaves no document for training")) << error;
  EXPECT_FALSE(testing::pathExists(dir_ / ("out" + std::to_string(runs_ - 1)) + "/tokens_val_000000.bin"));
}

TEST_F(CorpusTest, ExistingShardsOfTheSameNameAreRefused) {
  const std::string good = file("good.txt", "fine text\n");
  CorpusOptions options;
  options.out_dir = dir_ / "same";
  tokenizeCorpus({good}, tokenizer_, options, {});
  const std::string error = configErrorOf([&] { tokenizeCorpus({good}, tokenizer_, options, {}); });
  EXPECT_TRUE(contains(error, "already holds shards named tokens_*.bin")) << error;
  options.name = "other";
  EXPECT_EQ(tokenizeCorpus({good}, tokenizer_, options, {}).shards.size(), 1u);
}

TEST_F(CorpusTest, ATokenizerWithABeginOfTextFramesEachDocument) {
  using T = testing::TinyLlamaIds;
  testing::writeTinyLlama(dir_.path());
  const HfTokenizer llama(dir_.path());
  CorpusOptions options;
  options.out_dir = dir_ / "llama";
  options.split = {Mode::kSeparatorLine, "%"};
  const CorpusSummary summary = tokenizeCorpus({file("a.txt", "the\n%\nhello\n")}, llama, options, {});
  ASSERT_EQ(summary.shards.size(), 1u);
  const TokenShard shard(summary.shards[0].path, llama.vocabSize());
  std::vector<uint32_t> tokens;
  for (int64_t i = 0; i < shard.size(); ++i) tokens.push_back(shard.token(i));
  EXPECT_EQ(tokens, (std::vector<uint32_t>{T::kBeginOfText, 't', T::kHe, '\n', T::kEndOfText, T::kBeginOfText,
                                           T::kHello, '\n', T::kEndOfText}));
}

TEST(ShardTokenizer, NamesTheTokenizerOfASeries) {
  testing::TempDir dir("shard-tokenizer");
  const std::string shard = dir / "docs_train_000001.bin", val = dir / "docs_val_000000.bin";
  EXPECT_EQ(shardTokenizer({shard}), std::nullopt);  // none written: llm.c's shards
  writeShardTokenizer(dir.path(), "docs", {"hf", dir.path() + "/./"}, 265);
  const auto named = shardTokenizer({val, shard});
  ASSERT_TRUE(named);
  EXPECT_EQ(named->kind, "hf");
  char* absolute = ::realpath(dir.path().c_str(), nullptr);
  EXPECT_EQ(named->path, std::string(absolute));  // made absolute
  std::free(absolute);
  EXPECT_TRUE(contains(testing::readFile(dir / "docs_tokenizer.json"), "\"vocab_size\": 265"));
  EXPECT_EQ(shardTokenizer({dir / "fineweb.bin"}), std::nullopt);  // not llm.c's naming
  EXPECT_EQ(shardTokenizer({shard, dir / "other_train_000000.bin"}), std::nullopt);  // a series without one

  writeShardTokenizer(dir.path(), "other", {"byte", ""}, 257);
  std::string error = configErrorOf([&] { shardTokenizer({shard, dir / "other_train_000000.bin"}); });
  EXPECT_TRUE(contains(error, "made by two tokenizers")) << error;
  EXPECT_TRUE(contains(error, dir / "other_tokenizer.json" + " names byte")) << error;
  testing::writeFile(dir / "other_tokenizer.json", "{\"kind\": 3}");
  error = configErrorOf([&] { shardTokenizer({dir / "other_val_000000.bin"}); });
  EXPECT_TRUE(contains(error, dir / "other_tokenizer.json: \"kind\" is 3")) << error;
}

}  // namespace
}  // namespace dtrain::data
