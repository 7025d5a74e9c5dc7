// ResNet-18/34/50 with torchvision's architecture, parameter names and
// initialisation (v1.5: a bottleneck strides in its 3x3 conv), plus a CIFAR
// stem for small images.
#pragma once

#include "models/model.h"

#include <array>

namespace dtrain::models {

enum class ResNetBlock { kBasic, kBottleneck };  // expansion 1 and 4
enum class ResNetStem { kCifar, kImageNet };

struct ResNetConfig {
  ResNetBlock block = ResNetBlock::kBasic;
  std::array<int64_t, 4> layers = {2, 2, 2, 2};  // blocks per stage
  ResNetStem stem = ResNetStem::kImageNet;
  int64_t in_channels = 3;
  int64_t num_classes = 1000;
  bool zero_init_residual = false;
  int64_t image_size = 224;  // height = width of the input; sizes the FLOP count only
};

// Submodules are named as in torchvision (conv1, bn1, layer1.0.conv1,
// layer1.0.downsample.0, fc, ...), so state-dict keys line up.
class ResNet : public Model {
 public:
  explicit ResNet(const ResNetConfig& config);
  torch::Tensor forward(torch::Tensor x) override;

 private:
  torch::nn::Sequential makeStage(ResNetBlock block, int64_t planes,
                                  int64_t blocks, int64_t stride);
  // Adds one block's convolutions to forward_flops_; side_ is the input's
  // side and becomes the output's.
  void countBlock(ResNetBlock block, int64_t planes, int64_t stride, bool downsample);

  int64_t inplanes_ = 64;
  int64_t side_ = 0;
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  torch::nn::MaxPool2d maxpool_{nullptr};  // null for the CIFAR stem
  torch::nn::Sequential layer1_{nullptr}, layer2_{nullptr}, layer3_{nullptr},
      layer4_{nullptr};
  torch::nn::AdaptiveAvgPool2d avgpool_{nullptr};
  torch::nn::Linear fc_{nullptr};
};

}  // namespace dtrain::models
