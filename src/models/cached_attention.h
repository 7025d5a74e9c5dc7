// Attention of a chunk of new queries over every cached key: what a block
// computes during cached decoding (kv_cache.h), where the training path
// calls ops::causalAttention (transformer_ops.h) over the whole sequence.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace dtrain::models::ops {

// q [batch, heads, t, head_dim] holds positions offset .. offset + t - 1;
// k, v [batch, kv_heads, offset + t, head_dim] every position up to the
// last query's. Query i sees keys 0 .. offset + i: causal within the chunk,
// everything before it. kv_heads divides heads, each key/value head serving
// heads / kv_heads consecutive query heads (as causalAttention). Scores and
// softmax in float32 (double stays double); the result in q's dtype,
// [batch, heads, t, head_dim]. With offset 0 and t = seq this is
// causalAttention's mathematics.
torch::Tensor cachedAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              int64_t offset);

}  // namespace dtrain::models::ops
