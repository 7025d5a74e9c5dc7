#include "data/hf_tokenizer.h"

#include "common/error.h"
#include "data/gpt2_pretokenizer.h"
#include "data/llama3_pretokenizer.h"
#include "data/piece_cache.h"
#include "data/unicode_nfc.h"

namespace dtrain::data {

HfTokenizer::HfTokenizer(const std::string& dir) : HfTokenizer(readHfTokenizer(dir)) {}

HfTokenizer::HfTokenizer(HfTokenizerSpec spec)
    : spec_(std::move(spec)), added_(spec_.added), cache_(std::make_unique<PieceCache>()) {}

HfTokenizer::~HfTokenizer() = default;

std::vector<uint32_t> HfTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> ids;
  encodeInto(text, ids);
  return ids;
}

void HfTokenizer::encodeInto(std::string_view text, std::vector<uint32_t>& ids) const {
  std::vector<AddedTokenMatcher::Segment> outer, inner;
  std::string normalized;
  added_.splitExact(text, outer);
  for (const AddedTokenMatcher::Segment& segment : outer) {
    if (segment.id >= 0) {
      ids.push_back(static_cast<uint32_t>(segment.id));
      continue;
    }
    std::string_view stretch = segment.text;
    if (spec_.nfc) {
      normalized.clear();
      appendNfc(stretch, normalized);
      stretch = normalized;
    }
    inner.clear();
    added_.splitNormalized(stretch, inner);
    for (const AddedTokenMatcher::Segment& part : inner) {
      if (part.id >= 0) {
        ids.push_back(static_cast<uint32_t>(part.id));
      } else {
        encodeStretch(part.text, ids);
      }
    }
  }
}

void HfTokenizer::encodeStretch(std::string_view text, std::vector<uint32_t>& ids) const {
  std::vector<std::string_view> pieces;
  switch (spec_.split) {
    case PieceSplit::kGpt2:
      splitGpt2Pieces(text, pieces);
      break;
    case PieceSplit::kLlama3:
      splitLlama3Pieces(text, 3, pieces);
      break;
    case PieceSplit::kQwen2:
      splitLlama3Pieces(text, 1, pieces);
      break;
  }
  for (std::string_view piece : pieces) encodePiece(piece, ids);
}

void HfTokenizer::encodePiece(std::string_view piece, std::vector<uint32_t>& ids) const {
  if (piece.size() == 1) {
    ids.push_back(spec_.byte_ids[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (cache_->find(piece, ids)) return;
  std::vector<uint32_t> symbols;
  const auto whole = spec_.ignore_merges ? spec_.ids_by_bytes.find(std::string(piece)) : spec_.ids_by_bytes.end();
  if (whole != spec_.ids_by_bytes.end()) {
    symbols.push_back(whole->second);
  } else {
    symbols.reserve(piece.size());
    for (char c : piece) symbols.push_back(spec_.byte_ids[static_cast<unsigned char>(c)]);
    spec_.merges.apply(symbols);
  }
  ids.insert(ids.end(), symbols.begin(), symbols.end());
  cache_->insert(piece, std::move(symbols));
}

std::string HfTokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string text;
  for (uint32_t id : ids) {
    if (id >= spec_.tokens.size() || spec_.tokens[id].empty()) {
      throw ConfigError("token id " + std::to_string(id) + " is not in the tokenizer.json vocabulary (" +
                        (id < spec_.tokens.size() ? std::string("an id it leaves unassigned")
                                                  : "ids 0.." + std::to_string(spec_.tokens.size() - 1)) +
                        ")");
    }
    text += spec_.tokens[id];
  }
  return text;
}

}  // namespace dtrain::data
