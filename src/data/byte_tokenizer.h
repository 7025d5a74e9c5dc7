// The byte tokenizer: id b for byte b, 256 for end-of-text (torch-free;
// library dtrain_text). Needs no files; any bytes round-trip.
#pragma once

#include "data/tokenizer.h"

namespace dtrain::data {

class ByteTokenizer : public Tokenizer {
 public:
  static constexpr uint32_t kEndOfText = 256;

  std::vector<uint32_t> encode(std::string_view text) const override;
  void encodeInto(std::string_view text, std::vector<uint32_t>& ids) const override;
  std::string decode(const std::vector<uint32_t>& ids) const override;
  int64_t vocabSize() const override { return 257; }
  uint32_t eotToken() const override { return kEndOfText; }
  std::string name() const override { return "byte"; }
};

}  // namespace dtrain::data
