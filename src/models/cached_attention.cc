#include "models/cached_attention.h"

#include <cmath>
#include <limits>

namespace dtrain::models::ops {

torch::Tensor cachedAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              int64_t offset) {
  const int64_t batch = q.size(0), heads = q.size(1), t = q.size(2), head_dim = q.size(3);
  const int64_t kv_heads = k.size(1), keys = k.size(2);
  const torch::ScalarType compute = q.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  // Grouped heads as a broadcast dimension, so no key/value head is copied
  // per query head: q [B, kv, group, t, d] against k [B, kv, 1, keys, d].
  const torch::Tensor grouped = q.to(compute).view({batch, kv_heads, heads / kv_heads, t, head_dim});
  const torch::Tensor keys5 = k.to(compute).unsqueeze(2);
  const torch::Tensor values5 = v.to(compute).unsqueeze(2);
  torch::Tensor scores = torch::matmul(grouped, keys5.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
  if (t > 1) {
    // Key j is in query i's future when j > offset + i.
    const auto index = torch::TensorOptions().dtype(torch::kLong).device(q.device());
    const torch::Tensor future = torch::arange(keys, index).unsqueeze(0) > (torch::arange(t, index) + offset).unsqueeze(1);
    scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  }
  const torch::Tensor out = torch::matmul(torch::softmax(scores, -1), values5);
  return out.reshape({batch, heads, t, head_dim}).to(q.scalar_type());
}

}  // namespace dtrain::models::ops
