// GPT-2's tokenizer (torch-free; library dtrain_text): the pre-tokenizer
// (data/gpt2_pretokenizer.h) cuts the text into pieces, each piece's bytes
// are merged by rank (data/bpe_merges.h), and the ids of pieces seen before
// come from a cache. Gives the ids of OpenAI's encoder.py, tiktoken's
// "gpt2" encoding and the npm gpt-3-encoder (see unicode_classes.h for the
// two code points where JavaScript's \s differs; and the classes are
// Unicode 15.0's, so letters and digits assigned since count as "other").
#pragma once

#include <memory>
#include <string>

#include "data/gpt2_vocabulary.h"
#include "data/tokenizer.h"

namespace dtrain::data {

class PieceCache;

class Gpt2Tokenizer : public Tokenizer {
 public:
  // Reads dir/encoder.json and dir/vocab.bpe, or dir/vocab.json and dir/merges.txt
  // (errors: loadGpt2Vocabulary).
  explicit Gpt2Tokenizer(const std::string& dir);
  explicit Gpt2Tokenizer(Gpt2Vocabulary vocabulary);
  ~Gpt2Tokenizer() override;

  std::vector<uint32_t> encode(std::string_view text) const override;
  void encodeInto(std::string_view text, std::vector<uint32_t>& ids) const override;
  std::string decode(const std::vector<uint32_t>& ids) const override;
  int64_t vocabSize() const override { return static_cast<int64_t>(vocab_.tokens.size()); }
  uint32_t eotToken() const override { return vocab_.eot; }
  std::string name() const override { return "gpt2"; }

 private:
  void encodePiece(std::string_view piece, std::vector<uint32_t>& ids) const;

  Gpt2Vocabulary vocab_;
  std::unique_ptr<PieceCache> cache_;
};

}  // namespace dtrain::data
