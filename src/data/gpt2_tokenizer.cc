#include "data/gpt2_tokenizer.h"

#include <array>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "common/error.h"
#include "data/gpt2_pretokenizer.h"

namespace dtrain::data {

// The ids of pieces already merged. Sharded by hash so that encoding threads
// rarely wait on one another; a shard that grows past its cap is emptied
// (text keeps re-using a small set of words, so the cache refills at once).
class Gpt2Tokenizer::PieceCache {
 public:
  bool find(std::string_view piece, std::vector<uint32_t>& ids) {
    Shard& shard = shardOf(piece);
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto it = shard.ids.find(piece);
    if (it == shard.ids.end()) return false;
    ids.insert(ids.end(), it->second.begin(), it->second.end());
    return true;
  }
  void insert(std::string_view piece, std::vector<uint32_t> ids) {
    Shard& shard = shardOf(piece);
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (shard.ids.size() >= kShardCap) shard.ids.clear();
    shard.ids.emplace(std::string(piece), std::move(ids));
  }

 private:
  static constexpr size_t kShards = 64;
  static constexpr size_t kShardCap = 1 << 14;
  // Looks up a string_view without building a std::string.
  struct PieceHash {
    using is_transparent = void;
    size_t operator()(std::string_view piece) const { return std::hash<std::string_view>()(piece); }
  };
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<uint32_t>, PieceHash, std::equal_to<>> ids;
  };
  // The shard from the hash's high bits; the map inside uses the low ones.
  Shard& shardOf(std::string_view piece) { return shards_[(PieceHash()(piece) >> 58) % kShards]; }
  std::array<Shard, kShards> shards_;
};

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
