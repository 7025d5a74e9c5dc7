// The ids of pieces a BPE tokenizer has already merged, shared by its
// encoding threads (torch-free; library dtrain_text; header only).
//
// Sharded by hash so that encoding threads rarely wait on one another; a
// shard that grows past its cap is emptied (text keeps re-using a small set
// of words, so the cache refills at once).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dtrain::data {

class PieceCache {
 public:
  // Appends the ids of `piece` to `ids` when it is cached.
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

}  // namespace dtrain::data
