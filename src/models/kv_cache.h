// The keys and values a language model has already computed, so that
// sampling feeds each new token once instead of the whole sequence again.
//
//   KvCache cache(lm->config(), /*batch=*/1, /*capacity=*/prompt + new_tokens, torch::kCUDA);
//   torch::Tensor logits = lm->forwardCached(prompt_tokens, cache);  // [1, P, vocab]
//   logits = lm->forwardCached(next_token, cache);                   // [1, 1, vocab], position P
//
// Storage: per block, K and V of [batch, kv_heads, capacity, head_dim],
// allocated once; positions 0 .. length() - 1 hold values. Every sequence
// of the batch has the same length (no padding, no per-row offsets).
//
// Contract: forwardCached (language_model.h) calls slot(b) for every block
// b of one chunk of t new positions, each block appends exactly t positions
// through its slot, then advance(t). The cache is for one model shape (the
// config's blocks, kv_heads and head_dim); ConfigError names a mismatch.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "models/lm_config.h"

namespace dtrain::models {

// What one block sees of the cache during one chunk: its K and V buffers
// and the positions held before the chunk.
class KvSlot {
 public:
  KvSlot(torch::Tensor keys, torch::Tensor values, int64_t offset)
      : keys_(std::move(keys)), values_(std::move(values)), offset_(offset) {}

  // Positions held before this chunk: the first new position.
  int64_t offset() const { return offset_; }
  // Stores k, v [batch, kv_heads, t, head_dim] (converted to the cache's
  // dtype) at positions offset() .. offset() + t - 1 and returns the keys
  // and values of positions 0 .. offset() + t - 1 (views of the cache).
  std::pair<torch::Tensor, torch::Tensor> append(const torch::Tensor& k, const torch::Tensor& v);

 private:
  torch::Tensor keys_, values_;
  int64_t offset_;
};

class KvCache {
 public:
  // Zeroed buffers for `batch` sequences of up to `capacity` positions, on
  // options' device and of its dtype (float32 unless given; bf16 halves the
  // memory of a bf16-autocast model). ConfigError for batch or capacity < 1.
  KvCache(const LanguageModelConfig& config, int64_t batch, int64_t capacity,
          const torch::TensorOptions& options = torch::TensorOptions());

  int64_t batch() const { return batch_; }
  int64_t capacity() const { return capacity_; }
  // Positions held (the next chunk starts at this position).
  int64_t length() const { return length_; }
  int64_t blocks() const { return static_cast<int64_t>(keys_.size()); }

  // Block `block`'s slot for the next chunk.
  KvSlot slot(int64_t block);
  // After every block appended a chunk of t positions. ConfigError past capacity().
  void advance(int64_t t);
  // Forgets every position (the buffers stay allocated).
  void clear() { length_ = 0; }

 private:
  int64_t batch_, capacity_, length_ = 0;
  std::vector<torch::Tensor> keys_, values_;
};

}  // namespace dtrain::models
