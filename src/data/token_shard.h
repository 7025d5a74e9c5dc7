// Token shards in llm.c's format (torch-free; library dtrain_text).
//
// A shard is a 1,024-byte header of 256 little-endian int32, then the tokens:
//   header[0] = 20240520 (kTokenShardMagic)
//   header[1] = version: 1 = uint16 tokens (llm.c's format as is, vocabularies
//               up to 65,536 ids), 2 = uint32 tokens (dtrain's extension for
//               larger vocabularies; llm.c itself reads only version 1)
//   header[2] = token count (so at most 2^31 - 1 tokens per shard)
//   header[3..255] = 0
// and exactly `count` tokens follow, nothing else. llm.c's data scripts write
// fineweb_train_000001.bin / fineweb_val_000000.bin; token_shard_set.h reads
// such a series.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::data {

inline constexpr int32_t kTokenShardMagic = 20240520;
inline constexpr int32_t kTokenShardHeaderInts = 256;
inline constexpr int64_t kTokenShardHeaderBytes = kTokenShardHeaderInts * 4;
inline constexpr int32_t kTokenShardVersionUint16 = 1;
inline constexpr int32_t kTokenShardVersionUint32 = 2;
// The largest vocabulary whose ids fit a version 1 (uint16) shard.
inline constexpr int64_t kTokenShardUint16Vocab = 65536;

// Writes one shard in llm.c's format atomically (temp file + fsync + rename):
// a header of 256 int32 (magic, version, token count), then the tokens as
// uint16 (version 1) when vocab_size <= 65536, else uint32 (version 2).
// ConfigError when a token is >= vocab_size; IoError naming the path.
// (Also ConfigError for vocab_size outside [1, 2^32] or more than 2^31 - 1
// tokens, which the int32 header cannot count. Nothing is written then.)
void writeTokenShard(const std::string& path, const std::vector<uint32_t>& tokens, int64_t vocab_size);

// One shard file, memory-mapped read-only.
//
// Opening checks, each failure a ConfigError naming the file and what was
// expected: a regular file (a FIFO, a device such as /dev/zero or a directory
// is refused without reading it), at least a full header, the magic, a known
// version, a non-negative count, and a file size of exactly header + count
// tokens (a truncated body and trailing bytes are both refused) — all before
// mapping. With vocab_size > 0 every token is checked to be < vocab_size and
// the first offender is named by its token offset. OS failures are IoError.
//
// Reads are const and thread-safe. A file truncated by someone else while it
// is mapped makes reads fault (SIGBUS): shards are written once, atomically.
class TokenShard {
 public:
  explicit TokenShard(const std::string& path, int64_t vocab_size = 0);
  ~TokenShard();
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const std::string& path() const { return path_; }
  int32_t version() const { return version_; }
  int64_t size() const { return count_; }  // tokens
  int64_t tokenBytes() const { return version_ == kTokenShardVersionUint16 ? 2 : 4; }

  // Token i, 0 <= i < size() (std::out_of_range otherwise).
  uint32_t token(int64_t i) const;
  // Copies tokens [begin, begin + count) into out[0..count), widened to
  // int64 (torch's index type). std::out_of_range when the range leaves the
  // shard.
  void copyTokens(int64_t begin, int64_t count, int64_t* out) const;

 private:
  void checkRange(int64_t begin, int64_t count) const;
  void checkVocab(int64_t vocab_size) const;
  void unmap();

  std::string path_;
  int32_t version_ = 0;
  int64_t count_ = 0;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;  // past the header, inside map_
};

}  // namespace dtrain::data
