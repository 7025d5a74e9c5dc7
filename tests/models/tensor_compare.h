// How far a tensor is from a reference, in double precision (models_test).
#pragma once

#include <torch/types.h>

#include <algorithm>

namespace dtrain::models {

// ||got - ref||_2 / ||ref||_2: a few elements that round to the other side
// of a ReLU mask (bf16) move it little, where the max error would jump.
inline double normRelativeError(const torch::Tensor& got, const torch::Tensor& ref) {
  const torch::Tensor g = got.to(torch::kDouble), r = ref.to(torch::kDouble);
  return (g - r).norm().item<double>() / r.norm().item<double>();
}

// max |got - ref| / max |ref| (a reference of zeros counts as 1e-30).
inline double maxRelativeError(const torch::Tensor& got, const torch::Tensor& ref) {
  const double scale = ref.abs().max().item<double>();
  return (got.to(torch::kDouble) - ref.to(torch::kDouble)).abs().max().item<double>() / std::max(scale, 1e-30);
}

}  // namespace dtrain::models
