// What a tokenizer.json (and tokenizer_config.json) may not say: each case
// breaks one field of the tiny Llama-3-style tokenizer (hf_tokenizer_files.h)
// and expects a ConfigError naming the file, the field and its value.
#include <gtest/gtest.h>
#include <unistd.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/hf_tokenizer.h"
#include "tests/data/hf_tokenizer_files.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::data {
namespace {

using nlohmann::json;

struct Refusal {
  std::string name;
  std::function<void(json&)> change;
  std::string expected;  // in the message, after "<dir>/tokenizer.json: "
};

json& splitStep(json& t) { return t["pre_tokenizer"]["pretokenizers"][0]; }
json& byteLevelStep(json& t) { return t["pre_tokenizer"]["pretokenizers"][1]; }

const std::vector<Refusal>& refusals() {
  static const std::vector<Refusal> cases = {
      {"model_type", [](json& t) { t["model"]["type"] = "WordPiece"; }, "model.type is \"WordPiece\"; expected \"BPE\""},
      {"no_model", [](json& t) { t.erase("model"); }, "model is missing"},
      {"dropout", [](json& t) { t["model"]["dropout"] = 0.1; }, "model.dropout is 0.1"},
      {"subword_prefix", [](json& t) { t["model"]["continuing_subword_prefix"] = "##"; },
       "model.continuing_subword_prefix is \"##\""},
      {"word_suffix", [](json& t) { t["model"]["end_of_word_suffix"] = "</w>"; }, "model.end_of_word_suffix is \"</w>\""},
      {"byte_fallback", [](json& t) { t["model"]["byte_fallback"] = true; }, "model.byte_fallback is true"},
      {"ignore_merges_not_a_bool", [](json& t) { t["model"]["ignore_merges"] = "yes"; },
       "model.ignore_merges is \"yes\"; expected true or false"},
      {"vocab_not_an_object", [](json& t) { t["model"]["vocab"] = json::array(); }, "model.vocab is []"},
      {"vocab_negative_id", [](json& t) { t["model"]["vocab"]["xyz"] = -1; }, "model.vocab[\"xyz\"] is -1"},
      {"vocab_far_id", [](json& t) { t["model"]["vocab"]["xyz"] = 2000000000; },
       "model.vocab[\"xyz\"] is 2000000000; expected an integer id from 0 to 65801"},
      {"added_far_id", [](json& t) { t["added_tokens"][1]["id"] = 1u << 31; }, "added_tokens[1].id is 2147483648"},
      {"vocab_id_twice", [](json& t) { t["model"]["vocab"]["zzz"] = 'A'; },  // after "A" in the object's order
       "model.vocab[\"zzz\"] is 65; expected an id no other token has"},
      {"vocab_without_a_byte", [](json& t) { t["model"]["vocab"].erase(testing::byteLevel("\n")); },
       "model.vocab has no token \"Ċ\" for byte 10"},
      {"merge_not_in_vocab", [](json& t) { t["model"]["merges"].push_back({"q", "z"}); },
       "model.merges[6] is [\"q\",\"z\"]; expected two tokens of model.vocab whose concatenation is one too"},
      {"merge_of_three", [](json& t) { t["model"]["merges"].push_back("a b c"); }, "model.merges[6] is \"a b c\""},
      {"merge_of_one", [](json& t) { t["model"]["merges"][0] = json::array({"a"}); }, "model.merges[0] is [\"a\"]"},
      {"normalizer", [](json& t) { t["normalizer"] = {{"type", "NFKC"}}; }, "normalizer is {\"type\":\"NFKC\"}"},
      {"no_pre_tokenizer", [](json& t) { t["pre_tokenizer"] = nullptr; }, "pre_tokenizer is null"},
      {"pre_tokenizer_type", [](json& t) { t["pre_tokenizer"] = {{"type", "Whitespace"}}; },
       "pre_tokenizer.type is \"Whitespace\""},
      {"sequence_of_one", [](json& t) { t["pre_tokenizer"]["pretokenizers"].erase(1); },
       "pre_tokenizer.pretokenizers is [{"},
      {"pattern", [](json& t) { splitStep(t)["pattern"]["Regex"] = "\\s+|\\w+"; },
       "pre_tokenizer.pretokenizers[0].pattern.Regex is \"\\\\s+|\\\\w+\"; expected Llama 3's, Qwen 2's or GPT-2's"},
      {"pattern_string", [](json& t) { splitStep(t)["pattern"] = {{"String", " "}}; },
       "pre_tokenizer.pretokenizers[0].pattern is {\"String\":\" \"}"},
      {"behavior", [](json& t) { splitStep(t)["behavior"] = "Removed"; },
       "pre_tokenizer.pretokenizers[0].behavior is \"Removed\"; expected \"Isolated\""},
      {"invert", [](json& t) { splitStep(t)["invert"] = true; }, "pre_tokenizer.pretokenizers[0].invert is true"},
      {"split_last", [](json& t) { std::swap(splitStep(t), byteLevelStep(t)); }, "pre_tokenizer.pretokenizers[0] is {"},
      {"byte_level_regex", [](json& t) { byteLevelStep(t)["use_regex"] = true; },
       "pre_tokenizer.pretokenizers[1].use_regex is true"},
      {"prefix_space", [](json& t) { byteLevelStep(t)["add_prefix_space"] = true; },
       "pre_tokenizer.pretokenizers[1].add_prefix_space is true; expected false"},
      {"lone_byte_level_without_regex",
       [](json& t) { t["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}; },
       "pre_tokenizer.use_regex is false"},
      {"decoder", [](json& t) { t["decoder"] = {{"type", "WordPiece"}}; }, "decoder is {\"type\":\"WordPiece\"}"},
      {"added_not_an_array", [](json& t) { t["added_tokens"] = "none"; }, "added_tokens is \"none\""},
      {"added_without_id", [](json& t) { t["added_tokens"][0].erase("id"); }, "added_tokens[0].id is missing"},
      {"added_empty", [](json& t) { t["added_tokens"][1]["content"] = ""; }, "added_tokens[1].content is \"\""},
      {"added_lstrip", [](json& t) { t["added_tokens"][0]["lstrip"] = true; }, "added_tokens[0].lstrip is true"},
      {"added_rstrip", [](json& t) { t["added_tokens"][1]["rstrip"] = true; }, "added_tokens[1].rstrip is true"},
      {"added_single_word", [](json& t) { t["added_tokens"][0]["single_word"] = true; },
       "added_tokens[0].single_word is true"},
      {"not_an_object", [](json& t) { t = json::array(); }, "the top level is []"},
  };
  return cases;
}

TEST(HfTokenizerRefusals, EveryRefusalNamesTheFieldAndItsValue) {
  testing::TempDir dir("hf-refusals");
  for (const Refusal& refusal : refusals()) {
    json tokenizer = testing::tinyLlamaTokenizer();
    refusal.change(tokenizer);
    testing::writeJson(dir / "tokenizer.json", tokenizer);
    const std::string error = testing::configErrorOf([&] { HfTokenizer t(dir.path()); });
    EXPECT_TRUE(testing::contains(error, dir / "tokenizer.json: " + refusal.expected))
        << refusal.name << ": " << error;
  }
}

TEST(HfTokenizerRefusals, FilesAndTheConfigAreNamed) {
  testing::TempDir dir("hf-refusals");
  const auto error = [&] { return testing::configErrorOf([&] { HfTokenizer t(dir.path()); }); };
  std::string e = testing::configErrorOf([&] { HfTokenizer t(dir / "nowhere"); });
  EXPECT_TRUE(testing::contains(e, dir / "nowhere" + " does not exist")) << e;
  e = error();
  EXPECT_TRUE(testing::contains(e, dir.path() + " has no tokenizer.json")) << e;
  testing::writeFile(dir / "tokenizer.json", "{\"model\": ");
  e = error();
  EXPECT_TRUE(testing::contains(e, dir / "tokenizer.json: not valid JSON")) << e;

  testing::writeTinyLlama(dir.path());
  testing::writeJson(dir / "tokenizer_config.json", {{"eos_token", "<|nope|>"}});
  e = error();
  EXPECT_TRUE(testing::contains(e, dir / "tokenizer_config.json: eos_token is \"<|nope|>\"; expected a token of"))
      << e;
  testing::writeJson(dir / "tokenizer_config.json", {{"bos_token", 7}});
  e = error();
  EXPECT_TRUE(testing::contains(e, dir / "tokenizer_config.json: bos_token is 7")) << e;
  testing::writeFile(dir / "tokenizer_config.json", "not json");
  e = error();
  EXPECT_TRUE(testing::contains(e, dir / "tokenizer_config.json: not valid JSON")) << e;

  // No end-of-text token at all: no config, and none of the usual added tokens.
  ASSERT_EQ(::unlink((dir / "tokenizer_config.json").c_str()), 0);
  json tokenizer = testing::tinyLlamaTokenizer();
  tokenizer["added_tokens"] = json::array();
  testing::writeJson(dir / "tokenizer.json", tokenizer);
  e = error();
  EXPECT_TRUE(testing::contains(e, "has none of the added tokens <|endoftext|>, <|end_of_text|>, </s>")) << e;
}

}  // namespace
}  // namespace dtrain::data
