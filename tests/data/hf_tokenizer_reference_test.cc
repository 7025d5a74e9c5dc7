// The tokenizer.json tokenizer against Hugging Face's tokenizers itself (the
// npm package tokenizers, whose Rust core is the Python library's; run by
// node on tests/data/hf_reference.js): GPT-2's vocabulary and merges under
// Llama 3's pre-tokenizer (with ignore_merges and Llama 3's special tokens)
// and under Qwen 2's (with its NFC normalizer) must give the library's ids
// for tricky strings and a few hundred KB of real text. scripts/setup.sh installs the package in
// .deps/npm; the test fails, saying so, when it is missing.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/hf_tokenizer.h"
#include "tests/data/hf_tokenizer_files.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::data {
namespace {

using nlohmann::json;

std::string hfPackageDir() { return testing::sourceDir() + "/.deps/npm/node_modules/tokenizers"; }

bool present(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// GPT-2's files under a Split by `pattern` + ByteLevel, as Llama 3's
// tokenizer.json has them, with its special tokens.
json splitTokenizer(const std::string& pattern, bool ignore_merges, bool nfc = false) {
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                           {"use_regex", false}};
  const json split = {{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"},
                      {"invert", false}};
  json tokenizer = testing::gpt2TokenizerJson(/*merge_pairs=*/true,
                                              {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}});
  tokenizer["model"]["ignore_merges"] = ignore_merges;
  if (nfc) tokenizer["normalizer"] = {{"type", "NFC"}};
  for (const auto& [id, content] : {std::pair{50257, "<|begin_of_text|>"}, std::pair{50258, "<|end_of_text|>"}}) {
    tokenizer["added_tokens"].push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                                         {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  return tokenizer;
}

std::vector<std::string> texts() {
  std::vector<std::string> texts = {
      "", "Hello, world! How's it going?", "I'M you'RE it'S we'Ll I'd they'VE don'T 'sup ''s it'\u017F 'S 'LL",
      "1 12 123 1234 12345 1234567890 3.14159 1,000,000 ٣٤٥٦ ½ Ⅻ", "a  b   c    d", "  leading", "trailing   ",
      "\t\ttabs\tand\tmore\t", "line\nbreak\n\n\nmany\n", "windows\r\nlines\r\n", " \n \n ", "   \n\n  x",
      "x \u00A0y\u00A0\u00A0z", "\u3000全角\u3000", "para\u2028graph\u2029end\u0085nel", "\v\f vertical",
      "café cafe\u0301 Ångström A\u030A \u212B \u2126 a\u0302\u0323 a\u0301\u0301 \u0958 \u0344 \u1100\u1161\u11A8",
      "\u0301start e\u0301<|end_of_text|>\u0301 \uAC00\u11A8 \u0B47\u0B3E", "你好，世界！", "😀👍🏽 👨‍👩‍👧‍👦 🇫🇷", "Привет, мир!", "(hello) [x] {y}\n\n\n",
      "end.\r\n\r\nNext", "x  \n\n  y", "\uFEFFbom \u200Dzwj", "!!! ??? ... ``` ###", "http://example.com/a?b=c",
      "<|begin_of_text|>Hi<|end_of_text|><|endoftext|>", "<|begin_of_text| <|end_of_text|>x <|end_of_text|",
      "int main() {\n    return 0;\n}\n", std::string(300, '!') + " " + std::string(200, '-'),
  };
  const std::string fortunes = testing::readFile("/usr/share/games/fortunes/computers");
  size_t start = 0;
  while (start < fortunes.size()) {
    const size_t separator = fortunes.find("\n%\n", start);
    const size_t end = separator == std::string::npos ? fortunes.size() : separator + 3;
    texts.push_back(fortunes.substr(start, end - start));
    start = end;
  }
  return texts;
}

std::vector<std::vector<uint32_t>> referenceIds(const std::string& tokenizer_json, const std::string& texts_json,
                                                const std::string& out) {
  const std::string command = "node '" + testing::sourceDir() + "/tests/data/hf_reference.js' '" + hfPackageDir() +
                              "' '" + tokenizer_json + "' '" + texts_json + "' > '" + out + "'";
  const testing::CommandResult run = testing::runCommand(command, 120);
  if (run.exit_code != 0) throw std::runtime_error("node failed (" + std::to_string(run.exit_code) + "): " + run.output);
  return json::parse(testing::readFile(out)).get<std::vector<std::vector<uint32_t>>>();
}

TEST(HfTokenizerReference, Llama3AndQwen2GiveTheLibrarysIds) {
  ASSERT_TRUE(present(hfPackageDir() + "/package.json"))
      << hfPackageDir() << " is missing: run scripts/setup.sh (it installs the npm package tokenizers into .deps/npm)";
  ASSERT_TRUE(present(testing::gpt2PackageDir() + "/vocab.bpe")) << "run scripts/setup.sh";
  ASSERT_TRUE(present("/usr/share/games/fortunes/computers")) << "run scripts/setup.sh (Debian's fortunes)";
  testing::TempDir dir("hf-reference");
  const std::vector<std::string> all = texts();
  testing::writeJson(dir / "texts.json", all);
  const std::string llama3 = testing::kLlama3Pattern;
  std::string qwen2 = llama3;
  qwen2.replace(qwen2.find("\\p{N}{1,3}"), 10, "\\p{N}");
  for (const auto& [name, tokenizer] : {std::pair{"llama3", splitTokenizer(llama3, true)},
                                        std::pair{"qwen2", splitTokenizer(qwen2, false, /*nfc=*/true)}}) {
    ASSERT_EQ(::mkdir((dir / name).c_str(), 0755), 0);
    testing::writeJson(dir / name + "/tokenizer.json", tokenizer);
    const auto expected = referenceIds(dir / name + "/tokenizer.json", dir / "texts.json", dir / "ids.json");
    ASSERT_EQ(expected.size(), all.size());
    const HfTokenizer ours(dir / name);
    int differing = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      const std::vector<uint32_t> ids = ours.encode(all[i]);
      if (ids == expected[i]) continue;
      if (++differing <= 5) ADD_FAILURE() << name << " text #" << i << " \"" << all[i].substr(0, 80) << "\"";
    }
    EXPECT_EQ(differing, 0) << name << ": texts whose ids differ from tokenizers'";
  }
}

}  // namespace
}  // namespace dtrain::data
