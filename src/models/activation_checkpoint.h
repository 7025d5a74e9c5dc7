// Activation checkpointing (torch.utils.checkpoint's reentrant variant, for
// the C++ models): run a piece of the network without keeping its
// intermediate activations, and recompute them in backward.
//
//   std::vector<torch::Tensor> out = checkpointed(
//       [&](const std::vector<torch::Tensor>& in) { ... return {y, z}; }, {x, w});
//
// Contract:
// - Under grad mode, fn runs once without recording (no activations kept)
//   and the outputs get one autograd node that holds only the inputs. When
//   their gradients arrive, fn runs again with grad mode on, under the
//   autocast state the forward had (enabled and dtype, CPU and CUDA), on
//   detached copies of the inputs, and backward runs through that
//   recomputation: parameters that fn reads get their gradients
//   accumulated as if fn had run normally (their AccumulateGrad hooks fire,
//   inside this nested backward), and the inputs' gradients flow on.
// - Without grad mode (or when no input nor parameter needs a gradient)
//   it is fn(inputs), plainly.
// - fn must compute the same function both times: no random numbers
//   (the models have no dropout), no state it changes. It may return
//   undefined tensors and take undefined inputs; every defined output must
//   be a floating-point tensor.
// - Memory: the inputs stay alive until backward (the block's input
//   stream); fn's intermediates live only during its recomputation.
#pragma once

#include <functional>
#include <vector>

#include <torch/torch.h>

namespace dtrain::models {

using CheckpointedFn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

std::vector<torch::Tensor> checkpointed(CheckpointedFn fn, const std::vector<torch::Tensor>& inputs);

}  // namespace dtrain::models
