// A tokenizer.json's added tokens (special tokens such as <|endoftext|> or
// <|begin_of_text|>, and any others), found in the text before it is
// pre-tokenized, as Hugging Face's tokenizers finds them (torch-free;
// library dtrain_text).
//
// At each position the longest token that starts there wins, the leftmost
// position first (Aho-Corasick's leftmost-longest). The tokens that are not
// "normalized" are found first, in the text as given (splitExact); the
// normalized ones then in each stretch left between them, once the
// normalizer has run over it (splitNormalized). The stretches between tokens
// are pre-tokenized each on its own, so no piece spans a token.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/hf_tokenizer_json.h"

namespace dtrain::data {

class AddedTokenMatcher {
 public:
  // A stretch of text (id < 0) or an added token (its id).
  struct Segment {
    std::string_view text;
    int64_t id = -1;
  };

  explicit AddedTokenMatcher(const std::vector<HfAddedToken>& tokens);

  // Append the segments of `text`, in order, to `segments`, finding the
  // tokens that are not normalized, or those that are: no text segment is
  // empty, and their concatenation is `text`.
  void splitExact(std::string_view text, std::vector<Segment>& segments) const { exact_.split(text, segments); }
  void splitNormalized(std::string_view text, std::vector<Segment>& segments) const {
    normalized_.split(text, segments);
  }

 private:
  struct Group {
    struct Hash {
      using is_transparent = void;
      size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
    };
    std::unordered_map<std::string, uint32_t, Hash, std::equal_to<>> ids;
    std::vector<size_t> lengths;  // the tokens' lengths, longest first
    std::array<bool, 256> starts{};  // the tokens' first bytes

    void add(const std::string& content, uint32_t id);
    // The first token in text[from..]: its position and length (npos when none).
    std::pair<size_t, size_t> find(std::string_view text, size_t from) const;
    void split(std::string_view text, std::vector<Segment>& segments) const;
  };

  Group exact_, normalized_;
};

}  // namespace dtrain::data
