// A series of token shards read as one sequence, in file-name order
// (torch-free; library dtrain_text). llm.c's data scripts write a series per
// split into one directory: fineweb_val_000000.bin, fineweb_train_000001.bin,
// fineweb_train_000002.bin, ...
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/token_shard.h"
#include "data/token_source.h"

namespace dtrain::data {

// The shard files `spec` names, sorted by name (byte order, not locale):
//  - a directory: its *.bin files whose name contains "_<split>_" (llm.c's
//    naming), or all its *.bin files when split is empty; hidden files
//    (a writer's temp files) never;
//  - a glob pattern (containing *, ? or [): the paths glob(3) matches
//    (split is not applied);
//  - anything else: that one path.
// ConfigError naming spec, the split and what was expected when a directory
// or pattern yields no file; IoError when the OS refuses a listing.
std::vector<std::string> findTokenShards(const std::string& spec, const std::string& split = "");

// The shards opened as TokenShard (each one checked against vocab_size when
// it is > 0) and concatenated in the given order. Windows may cross from one
// shard into the next.
class TokenShardSet final : public TokenSource {
 public:
  // findTokenShards(spec, split), opened. The description names spec.
  static std::shared_ptr<TokenShardSet> open(const std::string& spec, const std::string& split = "",
                                             int64_t vocab_size = 0);

  // ConfigError when paths is empty; the shard errors of TokenShard.
  TokenShardSet(const std::vector<std::string>& paths, int64_t vocab_size, std::string origin);

  int64_t size() const override { return offsets_.back(); }
  void copyTokens(int64_t begin, int64_t count, int64_t* out) const override;
  // "3 token shards (120000000 tokens) from 'data/*_train_*.bin'".
  std::string describe() const override;

  const std::vector<TokenShard>& shards() const { return shards_; }

 private:
  std::vector<TokenShard> shards_;
  std::vector<int64_t> offsets_;  // offsets_[i]: first token of shard i; back(): total
  std::string origin_;
};

}  // namespace dtrain::data
