// splitmix64: a stateless, well-mixed hash, fixed forever (unlike torch's
// RNG), so random draws keyed by (seed, epoch, index) never change meaning.
// Used by the synthetic data set and the loader's augmentation.
#pragma once

#include <cstdint>

namespace dtrain::data {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t hash3(uint64_t a, uint64_t b, uint64_t c) {
  return splitmix64(splitmix64(splitmix64(a) ^ b) ^ c);
}

}  // namespace dtrain::data
