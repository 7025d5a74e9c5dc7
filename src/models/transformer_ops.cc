#include "models/transformer_ops.h"

#include <atomic>

#include "common/error.h"
#include "libtorch/compat.h"
#include "models/fp8_linear.h"
#include "models/fused_kernels_setting.h"
#include "models/fused_ops_cuda.h"

namespace dtrain::models::ops {
namespace {

namespace F = torch::nn::functional;

// Reductions and the loss run in at least float32; double (gradient checks)
// keeps its precision.
torch::ScalarType atLeastFloat(const torch::Tensor& x) {
  return x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

// A norm's output as the matmuls it feeds take it: under autocast, in
// autocast's dtype (what they would cast it to; the fused kernels write it
// so directly), else as it is.
torch::Tensor forMatmul(const torch::Tensor& normed) {
  const c10::DeviceType device = normed.device().type();
  if ((device != c10::DeviceType::CPU && device != c10::DeviceType::CUDA) || !compat::isAutocastEnabled(device)) {
    return normed;
  }
  return normed.to(compat::autocastDtype(device));
}

std::atomic<OpObserver*> g_observer{nullptr};
thread_local int t_depth = 0;  // operations of this thread inside one another

using Observed = ObservedOp;

}  // namespace

// Reports the outermost operation of a thread to the observer, if any.
ObservedOp::ObservedOp(OpKind kind, const torch::Tensor& on) : kind_(kind), on_(on), observer_(g_observer.load()) {
  if (t_depth++ == 0 && observer_ != nullptr) {
    observer_->opStarted(kind_, on_);
  } else {
    observer_ = nullptr;
  }
}

ObservedOp::~ObservedOp() {
  --t_depth;
  if (observer_ != nullptr) observer_->opEnded(kind_, on_);
}

const char* opKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kNorm: return "norm";
    case OpKind::kMlpActivation: return "mlp_activation";
    case OpKind::kRotary: return "rotary";
    case OpKind::kAttention: return "attention";
    case OpKind::kHeadAndLoss: return "head_and_loss";
    case OpKind::kProduct: return "products";
    case OpKind::kFp8Product: return "fp8_products";
    case OpKind::kFp8Cast: return "fp8_casts";
  }
  return "unknown";
}

void setOpObserver(OpObserver* observer) { g_observer.store(observer); }

torch::Tensor layerNorm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, double eps) {
  Observed observed(OpKind::kNorm, x);
  if (auto result = fused::layerNorm(x, weight, bias, eps)) return forMatmul(*result);
  return forMatmul(torch::layer_norm(x, {x.size(-1)}, weight, bias, eps));
}

ResidualAndNormed addLayerNorm(const torch::Tensor& residual, const torch::Tensor& update,
                               const torch::Tensor& weight, const torch::Tensor& bias, double eps) {
  Observed observed(OpKind::kNorm, residual);
  if (auto result = fused::addLayerNorm(residual, update, weight, bias, eps)) {
    return {result->residual, forMatmul(result->normed)};
  }
  torch::Tensor sum = residual + update;
  return {sum, layerNorm(sum, weight, bias, eps)};
}

torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  Observed observed(OpKind::kNorm, x);
  if (auto result = fused::rmsNorm(x, weight, eps)) return forMatmul(*result);
  const torch::Tensor wide = x.to(atLeastFloat(x));
  const torch::Tensor normed = wide * torch::rsqrt(wide.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return forMatmul(normed.to(x.scalar_type()) * weight);
}

ResidualAndNormed addRmsNorm(const torch::Tensor& residual, const torch::Tensor& update,
                             const torch::Tensor& weight, double eps) {
  Observed observed(OpKind::kNorm, residual);
  if (auto result = fused::addRmsNorm(residual, update, weight, eps)) {
    return {result->residual, forMatmul(result->normed)};
  }
  torch::Tensor sum = residual + update;
  return {sum, rmsNorm(sum, weight, eps)};
}

namespace {

// linear's product, unreported (its callers report it).
torch::Tensor bf16OrPlainLinear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (auto result = fused::linear(x, weight, bias)) return *result;
  if (!bias.defined() || x.dim() == 2) return torch::linear(x, weight, bias);
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  return torch::addmm(bias, x.reshape({-1, x.size(-1)}), weight.t()).view(sizes);
}

}  // namespace

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (fp8Takes(x, weight)) return fp8Linear(x, weight, bias);  // reports its casts and products itself
  Observed observed(OpKind::kProduct, x);
  return bf16OrPlainLinear(x, weight, bias);
}

std::vector<torch::Tensor> sharedInputLinears(const torch::Tensor& x, const std::vector<torch::Tensor>& weights) {
  std::vector<torch::Tensor> outs;
  if (weights.empty() || fp8Takes(x, weights[0])) {  // FP8 products report their casts and products
    for (const torch::Tensor& w : weights) outs.push_back(linear(x, w, torch::Tensor()));
    return outs;
  }
  // One report for the group.
  Observed observed(OpKind::kProduct, x);
  if (auto result = fused::sharedInputLinears(x, weights)) return *result;
  for (const torch::Tensor& w : weights) outs.push_back(bf16OrPlainLinear(x, w, torch::Tensor()));
  return outs;
}

torch::ScalarType matmulType(const torch::Tensor& x) {
  const c10::DeviceType device = x.device().type();
  if ((device == c10::DeviceType::CPU || device == c10::DeviceType::CUDA) && compat::isAutocastEnabled(device) &&
      x.is_floating_point()) {
    return compat::autocastDtype(device);
  }
  return x.scalar_type();
}

torch::Tensor linearGelu(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (fp8Takes(x, weight)) {  // the product in FP8, reported as such; the GELU apart
    const torch::Tensor h = linear(x, weight, bias);
    Observed observed(OpKind::kMlpActivation, h);
    return torch::gelu(h, "tanh");
  }
  Observed observed(OpKind::kMlpActivation, x);
  if (auto result = fused::linearGelu(x, weight, bias)) return *result;
  return torch::gelu(linear(x, weight, bias), "tanh");
}

torch::Tensor geluMlp(const torch::Tensor& x, const torch::Tensor& fc_weight, const torch::Tensor& fc_bias,
                      const torch::Tensor& proj_weight, const torch::Tensor& proj_bias) {
  // Under FP8 the products and casts report themselves, the GELU as the
  // activation; else one report for the whole MLP, fused or not
  // (linearGelu inside is not reported again).
  if (fp8Takes(x, fc_weight)) return linear(linearGelu(x, fc_weight, fc_bias), proj_weight, proj_bias);
  Observed observed(OpKind::kMlpActivation, x);
  if (auto result = fused::geluMlp(x, fc_weight, fc_bias, proj_weight, proj_bias)) return *result;
  return linear(linearGelu(x, fc_weight, fc_bias), proj_weight, proj_bias);
}

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  Observed observed(OpKind::kMlpActivation, gate);
  if (auto result = fused::swiglu(gate, up)) return *result;
  return torch::silu(gate) * up;
}

RotaryTable rotaryTable(int64_t seq_len, int64_t head_dim, double theta, torch::Device device,
                        torch::ScalarType dtype, const RopeScaling& scaling) {
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  const std::vector<double> f = rotaryFrequencies(head_dim, theta, scaling);
  const torch::Tensor frequencies = torch::tensor(f, f64);
  const torch::Tensor angles = torch::outer(torch::arange(seq_len, f64), frequencies);
  return {angles.cos().to(device, dtype), angles.sin().to(device, dtype), frequencies.to(device, torch::kFloat)};
}

torch::Tensor applyRotary(const torch::Tensor& x, const RotaryTable& table) {
  Observed observed(OpKind::kRotary, x);
  if (auto result = fused::applyRotary(x, table)) return *result;
  const int64_t seq = x.size(1), half = x.size(3) / 2;
  const torch::Tensor pairs = x.to(table.cos.scalar_type()).reshape({x.size(0), seq, x.size(2), half, 2});
  const torch::Tensor even = pairs.select(-1, 0), odd = pairs.select(-1, 1);
  // [seq, half] broadcast over batch and heads.
  const torch::Tensor cos = table.cos.narrow(0, 0, seq).unsqueeze(1);
  const torch::Tensor sin = table.sin.narrow(0, 0, seq).unsqueeze(1);
  const torch::Tensor rotated = torch::stack({even * cos - odd * sin, even * sin + odd * cos}, -1);
  return rotated.flatten(-2).to(x.scalar_type());
}

torch::Tensor causalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  Observed observed(OpKind::kAttention, q);
  const int64_t group = q.size(1) / k.size(1);
  if (group == 1) return compat::causalScaledDotProductAttention(q, k, v);
  // Each key/value head serves `group` consecutive query heads: SDPA takes
  // them as they are where it can (no copy of k and v in forward, no sum in
  // backward), else they are widened first.
  if (compat::kHasNativeGqa && nativeGqaSetting() && q.is_cuda()) {
    return compat::causalGroupedQueryAttention(q, k, v);
  }
  auto widen = [group](const torch::Tensor& t) {
    return t.unsqueeze(2)
        .expand({t.size(0), t.size(1), group, t.size(2), t.size(3)})
        .reshape({t.size(0), t.size(1) * group, t.size(2), t.size(3)});
  };
  return compat::causalScaledDotProductAttention(q, widen(k), widen(v));
}

PackedDocuments packedDocuments(const torch::Tensor& positions) {
  if (positions.dim() != 2 || positions.scalar_type() != torch::kLong) {
    throw ConfigError("packed samples: positions must be int64 [batch, seq], got " +
                      std::string(c10::toString(positions.scalar_type())) + " of " +
                      std::to_string(positions.dim()) + " dimensions");
  }
  // A sample's index within its row: how many starts up to each token.
  const torch::Tensor sample = positions.eq(0).cumsum(1);
  const int64_t seq = positions.size(1);
  const torch::Tensor causal =
      torch::ones({seq, seq}, positions.options().dtype(torch::kBool)).tril();
  const torch::Tensor same = sample.unsqueeze(2).eq(sample.unsqueeze(1));
  return {positions, same.logical_and(causal).unsqueeze(1)};
}

torch::Tensor documentAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const PackedDocuments& documents) {
  Observed observed(OpKind::kAttention, q);
  const int64_t group = q.size(1) / k.size(1);
  if (group == 1) return compat::maskedScaledDotProductAttention(q, k, v, documents.allowed);
  auto widen = [group](const torch::Tensor& t) {
    return t.unsqueeze(2)
        .expand({t.size(0), t.size(1), group, t.size(2), t.size(3)})
        .reshape({t.size(0), t.size(1) * group, t.size(2), t.size(3)});
  };
  return compat::maskedScaledDotProductAttention(q, widen(k), widen(v), documents.allowed);
}

torch::Tensor applyRotaryAt(const torch::Tensor& x, const RotaryTable& table, const torch::Tensor& positions) {
  Observed observed(OpKind::kRotary, x);
  const int64_t batch = x.size(0), seq = x.size(1), half = x.size(3) / 2;
  const torch::Tensor pairs = x.to(table.cos.scalar_type()).reshape({batch, seq, x.size(2), half, 2});
  const torch::Tensor even = pairs.select(-1, 0), odd = pairs.select(-1, 1);
  // [batch, seq, 1, half]: each token's row, broadcast over the heads.
  const torch::Tensor rows = positions.reshape({-1});
  const torch::Tensor cos = table.cos.index_select(0, rows).view({batch, seq, 1, half});
  const torch::Tensor sin = table.sin.index_select(0, rows).view({batch, seq, 1, half});
  const torch::Tensor rotated = torch::stack({even * cos - odd * sin, even * sin + odd * cos}, -1);
  return rotated.flatten(-2).to(x.scalar_type());
}

torch::Tensor classifier(const torch::Tensor& hidden, const torch::Tensor& weight) {
  Observed observed(OpKind::kHeadAndLoss, hidden);
  return F::linear(hidden, weight);
}

torch::Tensor classifierCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                     const torch::Tensor& targets) {
  Observed observed(OpKind::kHeadAndLoss, hidden);
  if (auto result = fused::classifierCrossEntropy(hidden, weight, targets)) return *result;
  const torch::Tensor logits = classifier(hidden, weight);
  return F::cross_entropy(logits.to(atLeastFloat(logits)).reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

}  // namespace dtrain::models::ops
