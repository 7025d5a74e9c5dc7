// The merge table of a byte-pair encoding and the merge loop itself
// (torch-free; library dtrain_text).
//
// Symbols are token ids. apply() gives exactly what GPT-2's encoder.py
// gives: repeatedly take the adjacent pair with the lowest rank and merge
// every occurrence of it, left to right without overlaps, until no adjacent
// pair has a rank. It runs in O(n log n) for a piece of n symbols (a
// priority queue over a linked list), not O(n^2) passes, so a megabyte of
// punctuation without a space cannot stall a tokenizer thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace dtrain::data {

class BpeMerges {
 public:
  // Adds the next merge: its rank is the number of merges added before it.
  // A pair added again takes its new rank (as a Python dict built from the
  // merges list does).
  void add(uint32_t left, uint32_t right, uint32_t merged);
  size_t size() const { return next_rank_; }

  // Merges `symbols` in place.
  void apply(std::vector<uint32_t>& symbols) const;

 private:
  struct Merge {
    uint32_t rank;
    uint32_t merged;
  };
  static uint64_t key(uint32_t left, uint32_t right) { return (uint64_t{left} << 32) | right; }
  const Merge* find(uint32_t left, uint32_t right) const;

  std::unordered_map<uint64_t, Merge> merges_;
  uint32_t next_rank_ = 0;
};

}  // namespace dtrain::data
