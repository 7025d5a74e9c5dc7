#include "models/model.h"

#include "common/error.h"
#include "models/language_model.h"
#include "models/mlp_cnn.h"
#include "models/resnet.h"

#include <algorithm>

namespace dtrain::models {
namespace {

std::string joinedNames() {
  std::string joined;
  for (const auto* names : {&modelNames(), &languageModelNames()}) {
    for (const auto& name : *names) {
      if (!joined.empty()) joined += ", ";
      joined += name;
    }
  }
  return joined;
}

ResNetStem pickStem(const ModelOptions& options) {
  if (options.stem == "cifar") return ResNetStem::kCifar;
  if (options.stem == "imagenet") return ResNetStem::kImageNet;
  if (options.stem == "auto") {
    return options.image_size <= 64 ? ResNetStem::kCifar : ResNetStem::kImageNet;
  }
  throw ConfigError("unknown model stem '" + options.stem +
                    "' (valid: auto, cifar, imagenet)");
}

std::shared_ptr<Model> makeResNet(ResNetBlock block,
                                  std::array<int64_t, 4> layers,
                                  const ModelOptions& options) {
  ResNetConfig config;
  config.block = block;
  config.layers = layers;
  config.stem = pickStem(options);
  config.in_channels = options.in_channels;
  config.num_classes = options.num_classes;
  config.zero_init_residual = options.zero_init_residual;
  config.image_size = options.image_size;
  return std::make_shared<ResNet>(config);
}

void validate(const std::string& name, const ModelOptions& options) {
  if (options.in_channels <= 0 || options.num_classes <= 0 ||
      options.image_size <= 0) {
    throw ConfigError("model '" + name +
                      "': in_channels, num_classes and image_size must be "
                      "positive (got " + std::to_string(options.in_channels) +
                      ", " + std::to_string(options.num_classes) + ", " +
                      std::to_string(options.image_size) + ")");
  }
  if (name == "cnn" && options.image_size < 4) {
    throw ConfigError("model 'cnn' needs image_size >= 4 (two 2x2 pools), got " +
                      std::to_string(options.image_size));
  }
}

}  // namespace

torch::Tensor Model::loss(const torch::Tensor& input, const torch::Tensor& target) {
  return torch::nn::functional::cross_entropy(forward(input).to(torch::kFloat), target);
}

torch::Tensor Model::packedLoss(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  throw ConfigError("this model cannot keep packed samples apart (packed batches are for language models)");
}

std::shared_ptr<Model> createModel(const std::string& name,
                                   const ModelOptions& options) {
  if (isLanguageModelName(name)) return createLanguageModel(namedLanguageModel(name, options.language_model));
  if (std::find(modelNames().begin(), modelNames().end(), name) ==
      modelNames().end()) {
    throw ConfigError("unknown model '" + name + "' (valid: " + joinedNames() +
                      ")");
  }
  validate(name, options);
  if (name == "mlp") return std::make_shared<Mlp>(options);
  if (name == "cnn") return std::make_shared<Cnn>(options);
  if (name == "resnet18") {
    return makeResNet(ResNetBlock::kBasic, {2, 2, 2, 2}, options);
  }
  if (name == "resnet34") {
    return makeResNet(ResNetBlock::kBasic, {3, 4, 6, 3}, options);
  }
  return makeResNet(ResNetBlock::kBottleneck, {3, 4, 6, 3}, options);
}

}  // namespace dtrain::models
