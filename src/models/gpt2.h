// GPT-2 (Radford et al. 2019) as nanoGPT writes it: learned token and
// position embeddings, pre-LayerNorm blocks of causal self-attention (one
// fused q/k/v projection) and a GELU (tanh) MLP, all with biases; a final
// LayerNorm; the output head tied to the token embedding unless the config
// unties it (then `lm_head`, without bias).
//
// Names: transformer.wte, transformer.wpe, transformer.h.<i>.{ln_1, attn.c_attn,
// attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, transformer.ln_f, lm_head (untied
// only: a tied head registers no second parameter).
//
// Initialisation as GPT-2/nanoGPT: every linear and embedding weight
// N(0, 0.02), the residual projections (attn.c_proj, mlp.c_proj) N(0, 0.02 /
// sqrt(2 x layers)), biases 0, LayerNorm gains 1.
#pragma once

#include "models/language_model.h"

namespace dtrain::models {

class Gpt2 : public LanguageModel {
 public:
  explicit Gpt2(const LanguageModelConfig& config);

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

  std::shared_ptr<torch::nn::Module> transformer_;
  torch::nn::Embedding wte_{nullptr};
  torch::nn::Embedding wpe_{nullptr};
  torch::nn::LayerNorm ln_f_{nullptr};
  torch::nn::Linear lm_head_{nullptr};  // null when tied
};

}  // namespace dtrain::models
