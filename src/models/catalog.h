// The names of the built-in models, torch-free, so that the dtrain binary
// can list and check them without loading libtorch (header only).
#pragma once

#include <string>
#include <vector>

namespace dtrain::models {

// The names createModel accepts, in a stable order.
inline const std::vector<std::string>& modelNames() {
  static const std::vector<std::string> names = {"mlp", "cnn", "resnet18", "resnet34", "resnet50"};
  return names;
}

}  // namespace dtrain::models
