#include "models/mlp_cnn.h"

namespace dtrain::models {

Mlp::Mlp(const ModelOptions& options) {
  layers_ = torch::nn::Sequential();
  layers_->push_back(torch::nn::Flatten());
  int64_t width = options.in_channels * options.image_size * options.image_size;
  for (int64_t hidden : options.mlp_hidden) {
    layers_->push_back(torch::nn::Linear(width, hidden));
    forward_flops_ += linearFlops(width, hidden);
    layers_->push_back(torch::nn::ReLU());
    width = hidden;
  }
  layers_->push_back(torch::nn::Linear(width, options.num_classes));
  forward_flops_ += linearFlops(width, options.num_classes);
  register_module("layers", layers_);
}

torch::Tensor Mlp::forward(torch::Tensor x) { return layers_->forward(x); }

namespace {

// Appended flat: a Sequential cannot hold a Sequential (its forward is a
// template, which AnyModule cannot wrap).
void appendConvBlock(torch::nn::Sequential& seq, int64_t in, int64_t out) {
  seq->push_back(torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false)));
  seq->push_back(torch::nn::BatchNorm2d(out));
  seq->push_back(torch::nn::ReLU());
  seq->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
}

}  // namespace

Cnn::Cnn(const ModelOptions& options) {
  features_ = torch::nn::Sequential();
  appendConvBlock(features_, options.in_channels, 32);
  appendConvBlock(features_, 32, 64);
  features_->push_back(torch::nn::Flatten());
  // Each max-pool floors the size: 28 -> 14 -> 7.
  const int64_t side = options.image_size / 2 / 2;
  classifier_ = torch::nn::Linear(64 * side * side, options.num_classes);
  forward_flops_ = convFlops(options.in_channels, 32, 3, options.image_size) +
                   convFlops(32, 64, 3, options.image_size / 2) + linearFlops(64 * side * side, options.num_classes);
  register_module("features", features_);
  register_module("classifier", classifier_);
}

torch::Tensor Cnn::forward(torch::Tensor x) {
  return classifier_->forward(features_->forward(x));
}

}  // namespace dtrain::models
