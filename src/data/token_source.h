// TokenSource: one long sequence of token ids that a language-model data set
// cuts into windows (torch-free; library dtrain_text). Implemented by
// TokenShardSet (shard files, memory-mapped) and InMemoryTokens (synthetic
// tokens for benchmarks and tests).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::data {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // Tokens in the whole sequence.
  virtual int64_t size() const = 0;
  // Copies tokens [begin, begin + count) into out[0..count), widened to
  // int64. std::out_of_range when the range leaves [0, size()). Const and
  // thread-safe.
  virtual void copyTokens(int64_t begin, int64_t count, int64_t* out) const = 0;
  // For start-up lines and errors: "2 token shards matching 'd/*_val_*.bin'".
  virtual std::string describe() const = 0;
};

// Tokens held in memory.
class InMemoryTokens final : public TokenSource {
 public:
  InMemoryTokens(std::vector<uint32_t> tokens, std::string description)
      : tokens_(std::move(tokens)), description_(std::move(description)) {}
  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  void copyTokens(int64_t begin, int64_t count, int64_t* out) const override;
  std::string describe() const override { return description_; }

 private:
  std::vector<uint32_t> tokens_;
  std::string description_;
};

// `count` synthetic tokens in [0, vocab_size), a pure function of
// (seed, vocab_size): a longer sequence extends a shorter one with the same
// seed, on every machine and libtorch version. Each token is followed by its
// fixed successor (a seeded hash of it) half of the time and by a random
// token otherwise, so a model can learn something (the loss falls), unlike
// pure noise. ConfigError when count < 0 or vocab_size is outside [1, 2^32].
std::vector<uint32_t> syntheticTokens(int64_t count, int64_t vocab_size, uint64_t seed);

}  // namespace dtrain::data
