// What dtrain reads of a Hugging Face tokenizer.json of the byte-level BPE
// family (GPT-2, Llama 3, Qwen 2, ...) and of the tokenizer_config.json
// beside it (torch-free; library dtrain_text).
//
// tokenizer.json, field by field:
//   model          type "BPE" (or no type); vocab {"token": id} in GPT-2's byte
//                  alphabet; merges as "left right" strings or ["left", "right"]
//                  pairs, highest priority first; ignore_merges (a piece that is
//                  a token as a whole takes that id without merging)
//   pre_tokenizer  ByteLevel (use_regex: GPT-2's pattern), or a Sequence of a
//                  Split by a pattern dtrain has a hand-written matcher for
//                  (Llama 3's, Qwen 2's or GPT-2's; behavior Isolated) and a
//                  ByteLevel without use_regex; add_prefix_space false
//   added_tokens   matched in the text before pre-tokenization
//   normalizer     null, or NFC (Qwen 2's; data/unicode_nfc.h)
//   decoder        null or ByteLevel
// post_processor (what a pipeline adds around one sequence), truncation and
// padding are not read: dtrain frames documents itself (data/tokenizer.h).
// tokenizer_config.json, when it is there: bos_token and eos_token (a string
// or {"content": ...}). Without one the end-of-text token is the added token
// <|endoftext|>, <|end_of_text|> or </s>, the first of them present.
//
// Everything else is refused with ConfigError naming the file, the field and
// its value: another model, pre-tokenizer, pattern or normalizer; dropout, a
// continuing-subword prefix or end-of-word suffix, byte fallback; an added
// token with single_word, lstrip or rstrip; a merge whose parts or result are
// not in the vocabulary; a byte without a token; no end-of-text token.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/bpe_merges.h"

namespace dtrain::data {

// The pattern a Split (or ByteLevel's use_regex) cuts the text with.
enum class PieceSplit { kGpt2, kLlama3, kQwen2 };

struct HfAddedToken {
  uint32_t id = 0;
  std::string content;
  // Hugging Face matches the tokens that are not "normalized" first, then
  // the others in what is left, once it is normalized.
  bool normalized = false;
};

struct HfTokenizerSpec {
  // id -> the bytes it decodes to ("" : unassigned). A vocabulary token in
  // GPT-2's byte alphabet decodes to its bytes, one that is not to its UTF-8
  // as written (as Hugging Face's ByteLevel decoder does); an added token to
  // its content.
  std::vector<std::string> tokens;
  std::array<uint32_t, 256> byte_ids{};
  BpeMerges merges;
  bool ignore_merges = false;
  // With ignore_merges: the bytes of each vocabulary token -> its id.
  std::unordered_map<std::string, uint32_t> ids_by_bytes;
  PieceSplit split = PieceSplit::kGpt2;
  bool nfc = false;  // the normalizer: NFC, or none
  std::vector<HfAddedToken> added;
  std::optional<uint32_t> bos;
  uint32_t eos = 0;
};

// Reads dir/tokenizer.json and, when present, dir/tokenizer_config.json.
// ConfigError as above, and naming the directory when it or its
// tokenizer.json does not exist; IoError when a file cannot be read.
HfTokenizerSpec readHfTokenizer(const std::string& dir);

}  // namespace dtrain::data
