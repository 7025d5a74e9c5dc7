// Llama 3 (Meta's reference model, as torchtitan writes it): a token
// embedding, pre-RMSNorm blocks of grouped-query attention with rotary
// positions and a SwiGLU feed-forward, no biases; a final RMSNorm; the
// output head tied to the token embedding or not (config.tie_embeddings).
//
// Names: tok_embeddings, layers.<i>.{attention_norm, attention.wq/wk/wv/wo,
// ffn_norm, feed_forward.w1/w2/w3}, norm, output (absent when tied).
//
// Initialisation (dtrain's choice; Meta publishes none for pre-training):
// as GPT-2's, every linear and embedding weight N(0, 0.02), the residual
// projections (attention.wo, feed_forward.w2) N(0, 0.02 / sqrt(2 x layers)),
// RMSNorm gains 1. A tied head rules out torchtitan's N(0, 1) embedding.
#pragma once

#include "models/language_model.h"

namespace dtrain::models {

// The rotary table a model's blocks share, rebuilt when the activations
// move to another device or precision.
class RotaryCache {
 public:
  RotaryCache(int64_t max_seq_len, int64_t head_dim, double theta, const RopeScaling& scaling = {});
  // The table for activations like x (float32 for all but double).
  const ops::RotaryTable& tableFor(const torch::Tensor& x);

 private:
  int64_t max_seq_len_;
  int64_t head_dim_;
  double theta_;
  RopeScaling scaling_;
  ops::RotaryTable table_;
};

class Llama : public LanguageModel {
 public:
  explicit Llama(const LanguageModelConfig& config);

  torch::Tensor embed(const torch::Tensor& tokens) override;
  torch::Tensor embedAt(const torch::Tensor& tokens, int64_t first_position) override;
  torch::Tensor finalNorm(const torch::Tensor& x) override;
  torch::Tensor finalNormOf(const ResidualStream& stream) override;
  torch::Tensor outputWeight() override;
  std::vector<torch::Tensor> embeddingParameters() override;
  std::vector<torch::Tensor> headParameters() override;

 protected:
  std::optional<LoraSite> loraSite(int64_t block, LoraTarget target) override;

 private:
  void initWeights();

  torch::nn::Embedding tok_embeddings_{nullptr};
  torch::Tensor norm_weight_;
  torch::nn::Linear output_{nullptr};  // null when tied
};

}  // namespace dtrain::models
