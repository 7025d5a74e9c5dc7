#include "models/resnet.h"

#include "models/fused_kernels_setting.h"
#include "models/fused_ops_cuda.h"

namespace dtrain::models {
namespace {

namespace nn = torch::nn;

// act(bn(x) [+ residual]), act = ReLU or identity (residual undefined: no
// add). On CUDA the fused kernel (fused::batchNormAct) when it takes the
// call: it reads and updates the module's own parameters and running
// statistics with the module's momentum and eps, and num_batches_tracked is
// bumped here as BatchNorm2d's forward does. Otherwise (the CPU, a layout
// the kernel declines, DTRAIN_FUSED_KERNELS=0, DTRAIN_FUSED_BATCH_NORM=0)
// the module and libtorch's add and ReLU, as before.
torch::Tensor bnAct(nn::BatchNorm2d& bn, const torch::Tensor& x, const torch::Tensor& residual, bool relu) {
  const auto& o = bn->options;
  // A cumulative average (momentum unset) reads the batch count on the host.
  if (fusedBatchNormSetting() && o.affine() && o.track_running_stats() && o.momentum().has_value()) {
    const bool training = bn->is_training();
    if (auto y = fused::batchNormAct(x, residual, bn->weight, bn->bias, bn->running_mean, bn->running_var, training,
                                     *o.momentum(), o.eps(), relu)) {
      if (training && bn->num_batches_tracked.defined()) bn->num_batches_tracked += 1;
      return *y;
    }
  }
  torch::Tensor out = bn->forward(x);
  if (residual.defined()) out = out + residual;
  return relu ? torch::relu(out) : out;
}

// The stem's max pooling: on CUDA the fused kernel (fused::maxPool2d,
// a one-byte argmax and a gather backward) when it takes the call and the
// fused CNN kernels are on (DTRAIN_FUSED_BATCH_NORM); else the module.
torch::Tensor maxPool(nn::MaxPool2d& pool, const torch::Tensor& x) {
  const auto& o = pool->options;
  const auto k = *o.kernel_size(), s = *o.stride(), p = *o.padding(), d = *o.dilation();
  if (fusedBatchNormSetting() && !o.ceil_mode() && k[0] == k[1] && s[0] == s[1] && p[0] == p[1] && d[0] == 1 &&
      d[1] == 1) {
    if (auto y = fused::maxPool2d(x, k[0], s[0], p[0])) return *y;
  }
  return pool->forward(x);
}

// The shortcut: x itself, or downsample = Sequential(conv1x1, BatchNorm2d)
// (named downsample.0 and .1, as torchvision) with its BN through bnAct.
torch::Tensor shortcut(nn::Sequential& downsample, const torch::Tensor& x) {
  if (!downsample) return x;
  nn::BatchNorm2d bn(std::dynamic_pointer_cast<nn::BatchNorm2dImpl>(downsample->ptr(1)));
  return bnAct(bn, downsample->ptr<nn::Conv2dImpl>(0)->forward(x), {}, false);
}

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) {
  return nn::Conv2d(
      nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

nn::Conv2d conv1x1(int64_t in, int64_t out, int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false));
}

// conv3x3 -> BN -> ReLU -> conv3x3 -> BN, plus the shortcut, then ReLU.
class BasicBlockImpl : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;

  BasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride,
                 nn::Sequential downsample)
      : conv1(register_module("conv1", conv3x3(inplanes, planes, stride))),
        bn1(register_module("bn1", nn::BatchNorm2d(planes))),
        conv2(register_module("conv2", conv3x3(planes, planes, 1))),
        bn2(register_module("bn2", nn::BatchNorm2d(planes))),
        downsample(downsample) {
    if (downsample) register_module("downsample", downsample);
  }

  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor identity = shortcut(downsample, x);
    torch::Tensor out = bnAct(bn1, conv1->forward(x), {}, true);
    return bnAct(bn2, conv2->forward(out), identity, true);
  }

  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Sequential downsample;
};

// conv1x1 -> conv3x3 (strided) -> conv1x1 (x4 channels), each with BN.
class BottleneckImpl : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;

  BottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride,
                 nn::Sequential downsample)
      : conv1(register_module("conv1", conv1x1(inplanes, planes, 1))),
        bn1(register_module("bn1", nn::BatchNorm2d(planes))),
        conv2(register_module("conv2", conv3x3(planes, planes, stride))),
        bn2(register_module("bn2", nn::BatchNorm2d(planes))),
        conv3(register_module("conv3",
                              conv1x1(planes, planes * kExpansion, 1))),
        bn3(register_module("bn3", nn::BatchNorm2d(planes * kExpansion))),
        downsample(downsample) {
    if (downsample) register_module("downsample", downsample);
  }

  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor identity = shortcut(downsample, x);
    torch::Tensor out = bnAct(bn1, conv1->forward(x), {}, true);
    out = bnAct(bn2, conv2->forward(out), {}, true);
    return bnAct(bn3, conv3->forward(out), identity, true);
  }

  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Conv2d conv3;
  nn::BatchNorm2d bn3;
  nn::Sequential downsample;
};

int64_t expansion(ResNetBlock block) {
  return block == ResNetBlock::kBasic ? BasicBlockImpl::kExpansion
                                      : BottleneckImpl::kExpansion;
}

}  // namespace

ResNet::ResNet(const ResNetConfig& config) {
  side_ = config.image_size;
  if (config.stem == ResNetStem::kImageNet) {
    side_ = convOutSize(side_, 7, 2, 3);
    forward_flops_ += convFlops(config.in_channels, inplanes_, 7, side_);
    side_ = convOutSize(side_, 3, 2, 1);  // the max-pool
  } else {
    forward_flops_ += convFlops(config.in_channels, inplanes_, 3, side_);
  }
  if (config.stem == ResNetStem::kImageNet) {
    conv1_ = nn::Conv2d(nn::Conv2dOptions(config.in_channels, inplanes_, 7)
                            .stride(2)
                            .padding(3)
                            .bias(false));
  } else {
    conv1_ = conv3x3(config.in_channels, inplanes_, 1);
  }
  register_module("conv1", conv1_);
  bn1_ = register_module("bn1", nn::BatchNorm2d(inplanes_));
  if (config.stem == ResNetStem::kImageNet) {
    maxpool_ = register_module(
        "maxpool", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
  }
  const auto& n = config.layers;
  layer1_ = register_module("layer1", makeStage(config.block, 64, n[0], 1));
  layer2_ = register_module("layer2", makeStage(config.block, 128, n[1], 2));
  layer3_ = register_module("layer3", makeStage(config.block, 256, n[2], 2));
  layer4_ = register_module("layer4", makeStage(config.block, 512, n[3], 2));
  avgpool_ = register_module(
      "avgpool", nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions(1)));
  fc_ = register_module("fc", nn::Linear(512 * expansion(config.block),
                                         config.num_classes));
  forward_flops_ += linearFlops(512 * expansion(config.block), config.num_classes);

  // torchvision's init; fc keeps nn.Linear's default. zero_init_residual
  // must come after this loop, which sets every BN gamma to 1.
  torch::NoGradGuard no_grad;
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* conv = module->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut,
                                torch::kReLU);
    } else if (auto* bn = module->as<nn::BatchNorm2d>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    }
  }
  if (config.zero_init_residual) {
    for (auto& stage : {layer1_, layer2_, layer3_, layer4_}) {
      for (auto& child : stage->children()) {
        if (auto* basic = child->as<BasicBlockImpl>()) {
          nn::init::zeros_(basic->bn2->weight);
        } else if (auto* bottleneck = child->as<BottleneckImpl>()) {
          nn::init::zeros_(bottleneck->bn3->weight);
        }
      }
    }
  }
}

nn::Sequential ResNet::makeStage(ResNetBlock block, int64_t planes,
                                 int64_t blocks, int64_t stride) {
  const int64_t out = planes * expansion(block);
  nn::Sequential downsample{nullptr};
  if (stride != 1 || inplanes_ != out) {
    downsample = nn::Sequential(conv1x1(inplanes_, out, stride),
                                nn::BatchNorm2d(out));
  }
  nn::Sequential stage;
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t s = i == 0 ? stride : 1;
    nn::Sequential ds = i == 0 ? downsample : nn::Sequential{nullptr};
    countBlock(block, planes, s, static_cast<bool>(ds));
    if (block == ResNetBlock::kBasic) {
      stage->push_back(std::make_shared<BasicBlockImpl>(inplanes_, planes, s, ds));
    } else {
      stage->push_back(std::make_shared<BottleneckImpl>(inplanes_, planes, s, ds));
    }
    inplanes_ = out;
  }
  return stage;
}

void ResNet::countBlock(ResNetBlock block, int64_t planes, int64_t stride, bool downsample) {
  const int64_t out_side = convOutSize(side_, 3, stride, 1);
  const int64_t out = planes * expansion(block);
  if (block == ResNetBlock::kBasic) {
    forward_flops_ += convFlops(inplanes_, planes, 3, out_side) + convFlops(planes, planes, 3, out_side);
  } else {
    forward_flops_ += convFlops(inplanes_, planes, 1, side_) + convFlops(planes, planes, 3, out_side) +
                      convFlops(planes, out, 1, out_side);
  }
  if (downsample) forward_flops_ += convFlops(inplanes_, out, 1, out_side);
  side_ = out_side;
}

torch::Tensor ResNet::forward(torch::Tensor x) {
  x = bnAct(bn1_, conv1_->forward(x), {}, true);
  if (maxpool_) x = maxPool(maxpool_, x);
  x = layer4_->forward(layer3_->forward(layer2_->forward(layer1_->forward(x))));
  x = torch::flatten(avgpool_->forward(x), 1);
  return fc_->forward(x);
}

}  // namespace dtrain::models
