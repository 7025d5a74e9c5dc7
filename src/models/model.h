// The model zoo's public API: one abstract Model and one factory.
//
//   auto model = dtrain::models::createModel("resnet18", {.in_channels = 3,
//                                                         .num_classes = 10,
//                                                         .image_size = 32});
//   torch::Tensor logits = model->forward(images);  // [N, num_classes]
//
// Models take NCHW float images of in_channels x image_size x image_size and
// return unnormalised logits. Unknown names or impossible options throw
// dtrain::ConfigError.
#pragma once

#include <torch/torch.h>

#include "models/torch_compat.h"

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
};

// A network whose forward maps a batch of images to logits. Subclasses
// register their parameters with torch::nn::Module as usual, so
// parameters(), to(), train()/eval() and torch::save work unchanged.
class Model : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
};

// The names createModel accepts, in a stable order.
const std::vector<std::string>& modelNames();

// Builds the named model (mlp|cnn|resnet18|resnet34|resnet50). Throws
// ConfigError naming the valid models for an unknown name, and for
// non-positive sizes or an unknown stem.
std::shared_ptr<Model> createModel(const std::string& name,
                                   const ModelOptions& options);

}  // namespace dtrain::models
