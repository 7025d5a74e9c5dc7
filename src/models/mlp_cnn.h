// Small reference models for Fashion-MNIST-sized inputs (1x28x28).
#pragma once

#include "models/model.h"

namespace dtrain::models {

// flatten -> [Linear -> ReLU] per hidden width -> Linear(num_classes).
class Mlp : public Model {
 public:
  explicit Mlp(const ModelOptions& options);
  torch::Tensor forward(torch::Tensor x) override;

 private:
  torch::nn::Sequential layers_{nullptr};
};

// Two [3x3 conv -> BN -> ReLU -> 2x2 max-pool] blocks (32 then 64 channels),
// then flatten -> Linear(num_classes).
class Cnn : public Model {
 public:
  explicit Cnn(const ModelOptions& options);
  torch::Tensor forward(torch::Tensor x) override;

 private:
  torch::nn::Sequential features_{nullptr};
  torch::nn::Linear classifier_{nullptr};
};

}  // namespace dtrain::models
