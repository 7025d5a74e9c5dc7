#include "models/kv_cache.h"

#include <string>

#include "common/error.h"

namespace dtrain::models {

std::pair<torch::Tensor, torch::Tensor> KvSlot::append(const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t t = k.size(2);
  // The caller (forwardCached) has checked that the chunk fits.
  keys_.narrow(2, offset_, t).copy_(k);
  values_.narrow(2, offset_, t).copy_(v);
  return {keys_.narrow(2, 0, offset_ + t), values_.narrow(2, 0, offset_ + t)};
}

KvCache::KvCache(const LanguageModelConfig& config, int64_t batch, int64_t capacity,
                 const torch::TensorOptions& options)
    : batch_(batch), capacity_(capacity) {
  if (batch < 1 || capacity < 1) {
    throw ConfigError("KV cache of model '" + config.name + "': batch " + std::to_string(batch) + " and capacity " +
                      std::to_string(capacity) + " must both be at least 1");
  }
  const std::vector<int64_t> shape = {batch, config.kv_heads, capacity, config.headDim()};
  for (int64_t b = 0; b < config.layers; ++b) {
    keys_.push_back(torch::zeros(shape, options));
    values_.push_back(torch::zeros(shape, options));
  }
}

KvSlot KvCache::slot(int64_t block) {
  if (block < 0 || block >= blocks()) {
    throw ConfigError("KV cache has " + std::to_string(blocks()) + " blocks, no block " + std::to_string(block) +
                      " (a cache made for another model?)");
  }
  return KvSlot(keys_[block], values_[block], length_);
}

void KvCache::advance(int64_t t) {
  if (t < 0 || length_ + t > capacity_) {
    throw ConfigError("KV cache: " + std::to_string(length_) + " positions + " + std::to_string(t) +
                      " new exceed its capacity of " + std::to_string(capacity_));
  }
  length_ += t;
}

}  // namespace dtrain::models
