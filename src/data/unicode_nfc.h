// Unicode Normalization Form C (UAX #15): what a tokenizer.json whose
// normalizer is NFC (Qwen 2's) asks of its text before pre-tokenization
// (torch-free; library dtrain_text). The tables are Unicode 9.0's, as
// Hugging Face's tokenizers has them (scripts/gen-unicode-nfc.py): a
// combining mark assigned since is a character of class 0 that composes
// with nothing, there as here.
//
// Only the stretches around characters that may change are normalized (a
// combining mark, a character NFC never holds, one that may join the one
// before it), each from the last stable starter before it to the next; the
// rest is copied, so text already in NFC (most text) costs a scan. Bytes
// that are not well-formed UTF-8 are kept as they are, and nothing composes
// across them.
#pragma once

#include <string>
#include <string_view>

namespace dtrain::data {

// Appends the NFC form of `text` to `out`.
void appendNfc(std::string_view text, std::string& out);

inline std::string toNfc(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  appendNfc(text, out);
  return out;
}

}  // namespace dtrain::data
