#include "data/gpt2_tokenizer.h"

#include "common/error.h"
#include "data/gpt2_pretokenizer.h"
#include "data/piece_cache.h"

namespace dtrain::data {

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& dir) : Gpt2Tokenizer(loadGpt2Vocabulary(dir)) {}

Gpt2Tokenizer::Gpt2Tokenizer(Gpt2Vocabulary vocabulary)
    : vocab_(std::move(vocabulary)), cache_(std::make_unique<PieceCache>()) {}

Gpt2Tokenizer::~Gpt2Tokenizer() = default;

std::vector<uint32_t> Gpt2Tokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> ids;
  encodeInto(text, ids);
  return ids;
}

void Gpt2Tokenizer::encodeInto(std::string_view text, std::vector<uint32_t>& ids) const {
  std::vector<std::string_view> pieces;
  splitGpt2Pieces(text, pieces);
  for (std::string_view piece : pieces) encodePiece(piece, ids);
}

void Gpt2Tokenizer::encodePiece(std::string_view piece, std::vector<uint32_t>& ids) const {
  if (piece.size() == 1) {
    ids.push_back(vocab_.byte_ids[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (cache_->find(piece, ids)) return;
  std::vector<uint32_t> symbols;
  symbols.reserve(piece.size());
  for (char c : piece) symbols.push_back(vocab_.byte_ids[static_cast<unsigned char>(c)]);
  vocab_.merges.apply(symbols);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
  cache_->insert(piece, std::move(symbols));
}

std::string Gpt2Tokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string text;
  for (uint32_t id : ids) {
    if (id >= vocab_.tokens.size() || vocab_.tokens[id].empty()) {
      throw ConfigError("token id " + std::to_string(id) + " is not in the GPT-2 vocabulary (ids 0.." +
                        std::to_string(vocab_.tokens.size() - 1) + ")");
    }
    text += vocab_.tokens[id];
  }
  return text;
}

}  // namespace dtrain::data
