// Writes a series of token shards the way llm.c's data scripts name them
// (torch-free; library dtrain_text):
//   <dir>/<name>_val_000000.bin, <name>_train_000001.bin, <name>_train_000002.bin ...
// Shards are numbered across the series; each holds `shard_tokens` tokens
// except the last of each split. The validation split, if any, comes first;
// without one the first shard is <name>_train_000000.bin. Each shard is
// written atomically by writeTokenShard (data/token_shard.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dtrain::data {

struct WrittenShard {
  std::string path;
  bool validation = false;
  int64_t tokens = 0;
};

class TokenShardSeriesWriter {
 public:
  // ConfigError when `dir` already holds shards of this name
  // (<name>_train_*.bin or <name>_val_*.bin: a new series would mix with
  // them) or is not a directory, when `name` is not a plain file name, or
  // shard_tokens < 1. `dir` and its parents are created with the first shard
  // (IoError when they cannot be).
  TokenShardSeriesWriter(std::string dir, std::string name, int64_t shard_tokens, int64_t vocab_size);

  // Appends tokens of the validation split (validation = true) or of the
  // training split. All validation tokens come first: ConfigError when a
  // validation append follows a training one.
  void append(std::span<const uint32_t> tokens, bool validation);
  // Writes the partial last shard. Returns every shard written.
  const std::vector<WrittenShard>& finish();

  const std::vector<WrittenShard>& written() const { return written_; }
  // Deletes every shard this series wrote (after a failure).
  void removeWritten();

 private:
  void flush();

  std::string dir_, name_;
  int64_t shard_tokens_, vocab_size_;
  std::vector<uint32_t> buffer_;
  bool buffer_validation_ = true;
  bool training_started_ = false;
  std::vector<WrittenShard> written_;
};

}  // namespace dtrain::data
