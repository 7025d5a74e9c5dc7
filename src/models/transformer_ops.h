// The operations of the transformer blocks that a fused kernel may replace,
// one function each. gpt2 and llama call these and nothing else for them,
// so the CUDA implementations (fused residual + norm, bias + GELU, SwiGLU,
// rotary, chunked classifier + cross-entropy: fused_ops_cuda.h) swap in here
// without a change to the models. Each is differentiable and runs on any
// device and under autocast: CUDA tensors take the fused kernels in builds
// that have them (unless DTRAIN_FUSED_KERNELS=0, or the kernel declines the
// shape or dtype), everything else plain libtorch.
//
// The norms' outputs feed matmuls only: under autocast they come in
// autocast's dtype (what the matmuls would cast them to), so the fused
// kernels write them narrow and no cast runs; the residual stream keeps its
// own dtype.
//
// Shapes: x is [..., dim]; heads are laid out [batch, seq, heads, head_dim]
// before attention's transpose and [batch, heads, seq, head_dim] inside it.
#pragma once

#include <torch/torch.h>

#include "models/lm_config.h"

namespace dtrain::models::ops {

// The residual stream after an update and its normalisation, as the fused
// "add + norm" kernels return them: residual = residual + update,
// normed = norm(residual).
struct ResidualAndNormed {
  torch::Tensor residual;
  torch::Tensor normed;
};

// LayerNorm over the last dimension with gain and bias.
torch::Tensor layerNorm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, double eps);
ResidualAndNormed addLayerNorm(const torch::Tensor& residual, const torch::Tensor& update,
                               const torch::Tensor& weight, const torch::Tensor& bias, double eps);

// RMSNorm as Meta's Llama: x / sqrt(mean(x²) + eps), computed in float32
// (double stays double), cast back to x's dtype, then times the gain.
torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
ResidualAndNormed addRmsNorm(const torch::Tensor& residual, const torch::Tensor& update,
                             const torch::Tensor& weight, double eps);

// x Wᵀ + b for x [..., in]: one matrix product with the bias added in its
// epilogue (ATen's addmm over the flattened rows), where the C++
// frontend's nn::Linear multiplies and then adds the bias in a second pass
// over the output whenever x has more than two dimensions.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// x Wᵢᵀ for weights that share the input x (no biases; Llama's q, k, v and
// its gate and up): linear of each, with one d(x) made inside the products
// in backward where the fused products take them (fused_ops_cuda.h).
std::vector<torch::Tensor> sharedInputLinears(const torch::Tensor& x, const std::vector<torch::Tensor>& weights);

// The dtype a matrix product of x runs in: autocast's while autocast is on
// for x's device, else x's own.
torch::ScalarType matmulType(const torch::Tensor& x);

// GELU (tanh approximation, as GPT-2) of x Wᵀ + b: the MLP's first layer.
torch::Tensor linearGelu(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// GPT-2's MLP: linear(linearGelu(x, fc_weight, fc_bias), proj_weight,
// proj_bias). The fused path keeps only the first product for the backward
// (not the GELU's output: 4 x dim values per token and block less).
torch::Tensor geluMlp(const torch::Tensor& x, const torch::Tensor& fc_weight, const torch::Tensor& fc_bias,
                      const torch::Tensor& proj_weight, const torch::Tensor& proj_bias);

// SwiGLU's gate: silu(gate) * up, gate = x W1ᵀ and up = x W3ᵀ.
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// cos and sin of the rotary angles, [seq, head_dim / 2]: position t and
// pair i turn by t * theta^(-2i / head_dim), scaled as `scaling` says
// (Llama 3.1's long-context frequencies). Computed in float64 (a float32
// t * frequency is off by ~1e-3 rad at t = 8192) and stored as `dtype`
// (float32, or float64 for double models).
struct RotaryTable {
  torch::Tensor cos;
  torch::Tensor sin;
  // [head_dim / 2] float32: theta^(-2i / head_dim), from which the fused
  // kernel computes the angles of positions 0..seq-1 itself. Leave it
  // undefined for a table whose rows start elsewhere (a KV cache's offset):
  // applyRotary then uses cos and sin.
  torch::Tensor inv_freq{};
};
RotaryTable rotaryTable(int64_t seq_len, int64_t head_dim, double theta, torch::Device device,
                        torch::ScalarType dtype = torch::kFloat, const RopeScaling& scaling = {});

// Rotates x [batch, seq, heads, head_dim] by the table's first seq rows.
// Pairs are interleaved (x[2i], x[2i+1]) as in Meta's Llama checkpoints
// (not Hugging Face's rotate-half layout). Computed in the table's dtype,
// returned in x's.
torch::Tensor applyRotary(const torch::Tensor& x, const RotaryTable& table);

// Causal self-attention of q [batch, heads, seq, head_dim] over k, v
// [batch, kv_heads, seq, head_dim] (kv_heads divides heads: each key/value
// head serves heads / kv_heads consecutive query heads, as in Llama's
// grouped-query attention). Through compat.h: SDPA on libtorch 2.x.
torch::Tensor causalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// Several samples packed into each row (instruction data): which tokens
// belong together. positions int64 [batch, seq] is each token's position
// within its sample, 0 where a sample starts (Hugging Face's position_ids
// of packed training); allowed bool [batch, 1, seq, seq] is the
// block-diagonal causal mask: query i reads key j when j <= i and no sample
// starts in (j, i].
struct PackedDocuments {
  torch::Tensor positions;
  torch::Tensor allowed;
  bool defined() const { return positions.defined(); }
};
// ConfigError unless positions is int64 [batch, seq] (on any device).
PackedDocuments packedDocuments(const torch::Tensor& positions);

// causalAttention restricted to each query's own sample (documents.allowed),
// through compat.h's masked SDPA.
torch::Tensor documentAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const PackedDocuments& documents);

// applyRotary with each token turned by its own position (positions
// [batch, seq], rows of the table) instead of 0..seq-1; libtorch operations
// on every device.
torch::Tensor applyRotaryAt(const torch::Tensor& x, const RotaryTable& table, const torch::Tensor& positions);

// The output head: logits = hidden Wᵀ, [..., vocab].
torch::Tensor classifier(const torch::Tensor& hidden, const torch::Tensor& weight);

// Mean cross-entropy of classifier(hidden, weight) against targets (same
// leading shape as hidden, int64 class ids), in float32 (double stays
// double) whatever the logits' dtype. The seam for a chunked kernel that
// never materialises the logits.
torch::Tensor classifierCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                     const torch::Tensor& targets);

// What the forward pass spends its time on, by kind of operation (dtrain
// bench train --breakdown): while an observer is set, each function above
// reports its start and end (an operation running inside another, like
// addLayerNorm's fallback calling layerNorm, is not reported again). The
// kinds: the four norms; linearGelu (with gpt2's fc matmul; geluMlp with
// both of its matmuls) and swiglu;
// applyRotary; causalAttention; classifier and classifierCrossEntropy (the
// head's matmuls, and with the fused kernel the head's gradients too);
// linear's products in bf16 or fp32; and under FP8 (fp8_linear.h) the
// scaled products and the casts to float8 apart (the forward's casts,
// with the transposes the backward takes). Under FP8, gpt2's MLP reports
// its products and casts as such and only the GELU as mlp_activation.
enum class OpKind { kNorm, kMlpActivation, kRotary, kAttention, kHeadAndLoss, kProduct, kFp8Product, kFp8Cast };
inline constexpr int kOpKinds = 8;
// "norm", "mlp_activation", "rotary", "attention", "head_and_loss",
// "products", "fp8_products", "fp8_casts".
const char* opKindName(OpKind kind);

class OpObserver {
 public:
  virtual ~OpObserver() = default;
  // `on` is the operation's first input (its device and stream are the
  // operation's). Observers must not throw.
  virtual void opStarted(OpKind kind, const torch::Tensor& on) = 0;
  virtual void opEnded(OpKind kind, const torch::Tensor& on) = 0;
};

// The observer of every later operation, on every thread (nullptr: none).
// Not owned; set it only while no model runs.
void setOpObserver(OpObserver* observer);

// Reports an operation of `kind` from construction to destruction, unless
// it runs inside another reported one (of this thread). `on` must outlive it.
class ObservedOp {
 public:
  ObservedOp(OpKind kind, const torch::Tensor& on);
  ~ObservedOp();
  ObservedOp(const ObservedOp&) = delete;
  ObservedOp& operator=(const ObservedOp&) = delete;

 private:
  OpKind kind_;
  const torch::Tensor& on_;
  OpObserver* observer_;
};

}  // namespace dtrain::models::ops
