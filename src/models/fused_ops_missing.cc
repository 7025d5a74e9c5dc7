// The fused path in a build without it (a CPU libtorch, or no CUDA
// compiler): every operation declines, so transformer_ops.cc and resnet.cc
// run libtorch's.
#include "models/fused_ops_cuda.h"

namespace dtrain::models::fused {

bool compiledIn() { return false; }

bool activeFor(const torch::Tensor&) { return false; }

std::optional<torch::Tensor> layerNorm(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, double) {
  return std::nullopt;
}

std::optional<ops::ResidualAndNormed> addLayerNorm(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                                   const torch::Tensor&, double) {
  return std::nullopt;
}

std::optional<torch::Tensor> rmsNorm(const torch::Tensor&, const torch::Tensor&, double) { return std::nullopt; }

std::optional<ops::ResidualAndNormed> addRmsNorm(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                                 double) {
  return std::nullopt;
}

std::optional<torch::Tensor> linear(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  return std::nullopt;
}

std::optional<std::vector<torch::Tensor>> sharedInputLinears(const torch::Tensor&,
                                                             const std::vector<torch::Tensor>&) {
  return std::nullopt;
}

std::optional<torch::Tensor> linearGelu(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  return std::nullopt;
}

std::optional<torch::Tensor> geluMlp(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                     const torch::Tensor&, const torch::Tensor&) {
  return std::nullopt;
}

std::optional<torch::Tensor> swiglu(const torch::Tensor&, const torch::Tensor&) { return std::nullopt; }

std::optional<torch::Tensor> applyRotary(const torch::Tensor&, const ops::RotaryTable&) { return std::nullopt; }

std::optional<torch::Tensor> classifierCrossEntropy(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  return std::nullopt;
}

std::optional<torch::Tensor> batchNormAct(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                          const torch::Tensor&, torch::Tensor&, torch::Tensor&, bool, double, double,
                                          bool) {
  return std::nullopt;
}

std::optional<torch::Tensor> maxPool2d(const torch::Tensor&, int64_t, int64_t, int64_t) { return std::nullopt; }

std::optional<Fp8Cast> fp8Cast(const torch::Tensor&, bool) { return std::nullopt; }
std::optional<Fp8Cast> fp8CastTransposed(const torch::Tensor&, bool, const torch::Tensor&) { return std::nullopt; }
std::optional<Fp8Cast> fp8CastAxiswise(const torch::Tensor&) { return std::nullopt; }

}  // namespace dtrain::models::fused
