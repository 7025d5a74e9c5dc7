// The model zoo's public API: one abstract Model and one factory.
//
//   auto model = dtrain::models::createModel("resnet18", {.in_channels = 3,
//                                                         .num_classes = 10,
//                                                         .image_size = 32});
//   torch::Tensor logits = model->forward(images);  // [N, num_classes]
//   torch::Tensor loss = model->loss(images, labels);
//
// Models take NCHW float images of in_channels x image_size x image_size and
// return unnormalised logits. Unknown names or impossible options throw
// dtrain::ConfigError.
#pragma once

#include <torch/torch.h>

#include "models/catalog.h"
#include "models/lm_config.h"
#include "libtorch/compat.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::models {

struct ModelOptions {
  int64_t in_channels = 3;
  int64_t num_classes = 10;
  // Height == width of the input images; sizes the mlp/cnn heads and picks
  // the resnet stem under "auto".
  int64_t image_size = 32;
  // Resnet stem: "auto" (cifar when image_size <= 64, else imagenet),
  // "cifar" (3x3 stride-1 conv, no max-pool) or "imagenet" (7x7 stride-2
  // conv + 3x3 stride-2 max-pool). Ignored by mlp and cnn.
  std::string stem = "auto";
  // Hidden layer widths of the mlp (each Linear + ReLU).
  std::vector<int64_t> mlp_hidden = {256, 128};
  // torchvision's zero_init_residual: zero the last BN gamma of each
  // residual branch so every block starts as the identity.
  bool zero_init_residual = false;
  // Language models only (catalog.h's languageModelNames()): what replaces
  // the named size's shape. The image fields above do not apply to them.
  LanguageModelOverrides language_model;
};

// A network trained by the runtime, image classifier or language model
// alike. Subclasses register their parameters with torch::nn::Module as
// usual, so parameters(), to(), train()/eval() and torch::save work
// unchanged.
// Where a model's forward is, unit by unit, for a wrapper that keeps each
// unit's parameters elsewhere between uses (ZeRO-3: DataParallel gathers a
// unit just before its forward and again before its backward). Unit 0 is
// the model's root (what no other unit holds: a language model's
// embeddings, final norm and head); units 1.. are its blocks in order.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // Before unit `unit`'s forward reads its parameters (unit 0: at the
  // start of the forward).
  virtual void beforeForward(int unit) = 0;
  // After unit `unit`'s forward: its outputs (undefined ones allowed), and
  // what the model goes on with instead, the same values; under grad mode
  // their gradients arriving in backward are the unit's "before
  // backward". Unit 0's output is the loss: its gradient arriving is the
  // start of backward.
  virtual std::vector<torch::Tensor> afterForward(int unit, std::vector<torch::Tensor> outputs) = 0;
};

class Model : public torch::nn::Module {
 public:
  // The network's output for a batch of inputs: logits.
  virtual torch::Tensor forward(torch::Tensor input) = 0;
  // The training loss of a batch, a float32 scalar averaged over its
  // samples. Default: cross-entropy of forward(input) (in float32) against
  // class indices. Runs under whatever autocast scope the caller opened.
  virtual torch::Tensor loss(const torch::Tensor& input, const torch::Tensor& target);
  // loss() of a batch whose rows each hold several samples (language
  // models: positions int64 [B, T], each token's position within its
  // sample, 0 where one starts; models/transformer_ops.h PackedDocuments):
  // no token attends across samples. Targets of the ignore index -100 do
  // not count. Default: ConfigError (the model cannot keep samples apart).
  virtual torch::Tensor packedLoss(const torch::Tensor& input, const torch::Tensor& target,
                                   const torch::Tensor& positions);
  // Floating-point operations of one training step (forward and backward)
  // per sample, a multiply-add counting 2: three times the forward's
  // convolutions and matrix products (backward computes two products per
  // forward one). Normalisation, activations and pooling are not counted.
  double trainingFlopsPerSample() const { return 3 * forward_flops_; }
  // Parameters the optimizer's weight decay must leave alone (GPT recipes:
  // norms, biases and embeddings). Default: none, every parameter decays.
  virtual std::vector<torch::Tensor> noWeightDecayParameters() { return {}; }
  // The model's units for UnitHooks: unit 0 (the root) first, then one per
  // block, each listing its parameters; together every trainable
  // parameter once. Empty (the default): the model has no units and calls
  // no hooks.
  virtual std::vector<std::vector<torch::Tensor>> shardingUnits() { return {}; }
  // The hooks of every later forward (nullptr: none); not owned. Only
  // models with shardingUnits() call them.
  void setUnitHooks(UnitHooks* hooks) { unit_hooks_ = hooks; }
  UnitHooks* unitHooks() const { return unit_hooks_; }

 protected:
  // Set by the constructor: the forward's FLOPs per sample.
  double forward_flops_ = 0;

 private:
  UnitHooks* unit_hooks_ = nullptr;
};

// FLOPs of a convolution (k x k kernel, no groups) producing an out x out
// map, and of a linear layer, per sample.
inline double convFlops(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t out_size) {
  return 2.0 * static_cast<double>(kernel * kernel * in_channels * out_channels * out_size * out_size);
}
inline double linearFlops(int64_t in_features, int64_t out_features) {
  return 2.0 * static_cast<double>(in_features * out_features);
}
// The side of a convolution's or pooling's output.
inline int64_t convOutSize(int64_t in_size, int64_t kernel, int64_t stride, int64_t padding) {
  return (in_size + 2 * padding - kernel) / stride + 1;
}

// Builds the named model (mlp|cnn|resnet18|resnet34|resnet50, or a language
// model of languageModelNames(): then a LanguageModel of
// models/language_model.h). Throws ConfigError naming the valid models for
// an unknown name, and for non-positive sizes or an unknown stem.
std::shared_ptr<Model> createModel(const std::string& name,
                                   const ModelOptions& options);

}  // namespace dtrain::models
