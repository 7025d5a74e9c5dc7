// A Hugging Face tokenizer.json of the byte-level BPE family (GPT-2, Llama 3,
// Qwen 2) in C++ (torch-free; library dtrain_text): what
// data/hf_tokenizer_json.h reads, applied the way Hugging Face's tokenizers
// applies it, so the ids are the library's.
//
// encode(): the added tokens are found in the text first (data/added_tokens.h;
// "<|endoftext|>" in the text is that token's id, as in tokenizers); each
// stretch between them is normalized (NFC, data/unicode_nfc.h, when the
// normalizer says so) and cut by the pre-tokenizer's pattern
// (data/gpt2_pretokenizer.h or data/llama3_pretokenizer.h); each piece's
// bytes are merged by rank (data/bpe_merges.h; with ignore_merges, a piece
// that is a token as a whole is that token). decode(): each id's bytes
// (an added token's content), so decode(encode(text)) == text for any bytes
// (with NFC: for any text already in NFC).
//
// The merge order is GPT-2's encoder.py's, which is the tokenizers library's
// whenever a merge's parts are made by merges ranked before it (as in every
// trained BPE).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "data/added_tokens.h"
#include "data/hf_tokenizer_json.h"
#include "data/tokenizer.h"

namespace dtrain::data {

class PieceCache;

class HfTokenizer : public Tokenizer {
 public:
  // Reads dir/tokenizer.json (and dir/tokenizer_config.json): readHfTokenizer's errors.
  explicit HfTokenizer(const std::string& dir);
  explicit HfTokenizer(HfTokenizerSpec spec);
  ~HfTokenizer() override;

  std::vector<uint32_t> encode(std::string_view text) const override;
  void encodeInto(std::string_view text, std::vector<uint32_t>& ids) const override;
  std::string decode(const std::vector<uint32_t>& ids) const override;
  int64_t vocabSize() const override { return static_cast<int64_t>(spec_.tokens.size()); }
  uint32_t eotToken() const override { return spec_.eos; }
  std::optional<uint32_t> bosToken() const override { return spec_.bos; }
  std::string name() const override { return "hf"; }

 private:
  void encodeStretch(std::string_view text, std::vector<uint32_t>& ids) const;
  void encodePiece(std::string_view piece, std::vector<uint32_t>& ids) const;

  HfTokenizerSpec spec_;
  AddedTokenMatcher added_;
  std::unique_ptr<PieceCache> cache_;
};

}  // namespace dtrain::data
