#include "data/token_source.h"

#include <algorithm>
#include <stdexcept>

#include "common/error.h"
#include "data/counter_hash.h"

namespace dtrain::data {

void InMemoryTokens::copyTokens(int64_t begin, int64_t count, int64_t* out) const {
  if (begin < 0 || count < 0 || begin > size() - count) {
    throw std::out_of_range(description_ + ": tokens [" + std::to_string(begin) + ", " +
                            std::to_string(begin + count) + ") requested; it holds " + std::to_string(size()));
  }
  std::copy(tokens_.begin() + begin, tokens_.begin() + begin + count, out);
}

std::vector<uint32_t> syntheticTokens(int64_t count, int64_t vocab_size, uint64_t seed) {
  if (count < 0) throw ConfigError("synthetic tokens: count is " + std::to_string(count) + "; expected >= 0");
  if (vocab_size < 1 || vocab_size > (int64_t{1} << 32)) {
    throw ConfigError("synthetic tokens: vocabulary size is " + std::to_string(vocab_size) +
                      "; expected 1..4294967296");
  }
  const auto vocab = static_cast<uint64_t>(vocab_size);
  // Distinct stream tags keep the successor table, the coin and the random
  // draw independent of each other.
  constexpr uint64_t kSuccessor = 1, kCoin = 2, kDraw = 3;
  std::vector<uint32_t> tokens(static_cast<size_t>(count));
  uint64_t previous = 0;
  for (int64_t i = 0; i < count; ++i) {
    const auto index = static_cast<uint64_t>(i);
    const bool follow = i > 0 && (hash3(seed, kCoin, index) & 1) != 0;
    const uint64_t next = follow ? hash3(seed, kSuccessor, previous) % vocab : hash3(seed, kDraw, index) % vocab;
    tokens[static_cast<size_t>(i)] = static_cast<uint32_t>(next);
    previous = next;
  }
  return tokens;
}

}  // namespace dtrain::data
