// LoRA (Hu et al. 2021, "Low-Rank Adaptation of Large Language Models"):
// a frozen linear layer y = x Wᵀ (+ b) learns through two small matrices,
//
//   y = x Wᵀ (+ b) + (alpha / r) · (x Aᵀ) Bᵀ,   A [r, in], B [rows, r],
//
// A drawn as PEFT draws it (kaiming-uniform with a = sqrt(5): U(-1/sqrt(in),
// 1/sqrt(in))), B zeros, so an adapted model starts equal to its base.
//
// Contract:
// - An adapter covers `rows` consecutive output rows of one weight from
//   row_begin (all of them, or one of gpt2's fused q/k/v thirds); its A
//   and B are registered as parameters of the layer's module, named
//   lora_A<suffix> and lora_B<suffix> (llama's "layers.0.attention.wq.lora_A",
//   gpt2's "transformer.h.0.attn.c_attn.lora_A_q"), in float32 (float64
//   when the weight is).
// - LoraAdapters is a model's set of them: delta(x, W) is the sum of W's
//   adapters' products, each placed on its rows of the output (undefined
//   when W has none); the models add it to their own product
//   (language_model.h's blockLinear). Under autocast the products run in
//   its dtype like every other matmul.
// - mergedParameters: every parameter of the model but the adapters, by
//   name, each adapted weight as W + (alpha / r) B A on its rows (in
//   float32, or the weight's dtype when wider): the weights of a model
//   without adapters that computes what the adapted one does.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "models/lora_config.h"

namespace dtrain::models {

// Where an adapter goes: the module that holds the weight, the weight, and
// the rows it covers; the suffix of its parameters' names.
struct LoraSite {
  torch::nn::Module* owner = nullptr;
  torch::Tensor weight;  // [out, in]
  int64_t row_begin = 0;
  int64_t rows = 0;
  std::string suffix;  // "" or "_q", "_k", "_v"
};

struct LoraAdapter {
  torch::Tensor weight;  // the adapted weight (frozen)
  int64_t row_begin = 0;
  torch::Tensor a;  // [r, in]
  torch::Tensor b;  // [rows, r]
};

class LoraAdapters {
 public:
  bool empty() const { return adapters_.empty(); }
  const LoraConfig& config() const { return config_; }
  const std::vector<LoraAdapter>& all() const { return adapters_; }
  // Whether `weight` has adapters.
  bool adapts(const torch::Tensor& weight) const;
  // (alpha / r) (x Aᵀ) Bᵀ of each of weight's adapters, on its rows of an
  // output [..., weight.size(0)]; undefined when it has none.
  torch::Tensor delta(const torch::Tensor& x, const torch::Tensor& weight) const;

  // Registers a new adapter at `site` (see the contract), drawn from
  // torch's default generator; `config` is every adapter's.
  void add(const LoraSite& site, const LoraConfig& config);

 private:
  LoraConfig config_;
  std::vector<LoraAdapter> adapters_;
  std::unordered_map<const void*, std::vector<size_t>> by_weight_;
};

std::vector<std::pair<std::string, torch::Tensor>> mergedParameters(torch::nn::Module& model,
                                                                    const LoraAdapters& adapters);

}  // namespace dtrain::models
