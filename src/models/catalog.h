// The names of the built-in models, torch-free, so that the dtrain binary
// can list and check them without loading libtorch (header only).
#pragma once

#include <string>
#include <vector>

namespace dtrain::models {

// The image models createModel accepts, in a stable order.
inline const std::vector<std::string>& modelNames() {
  static const std::vector<std::string> names = {"mlp", "cnn", "resnet18", "resnet34", "resnet50"};
  return names;
}

// The language models (models/lm_config.h describes their shapes), in a
// stable order: a family's name alone is its smallest size. createModel
// accepts them too; createLanguageModel (models/language_model.h) builds
// one from a full LanguageModelConfig.
inline const std::vector<std::string>& languageModelNames() {
  static const std::vector<std::string> names = {"gpt2",  "gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b",
                                                 "llama", "llama-1b",  "llama-3b",  "llama-8b"};
  return names;
}

}  // namespace dtrain::models
