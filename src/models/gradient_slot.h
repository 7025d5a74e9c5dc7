// Where a parameter's gradient goes when its owner lets backward write it
// in place (the seam between the kernels here and parallel/'s
// DataParallel, which keeps gradients in flat buffers: a gradient slab, or
// with sharded gradients the staging buffer of the parameter's bucket).
//
// The owner's lazy zeroGrad (DataParallel::zeroGrad(/*set_to_none=*/true))
// marks the gradients stale instead of filling the buffer with zeros; the
// first gradient of the next backward is then written over what the buffer
// holds (a copy, or a product written straight into it) rather than added
// to zeros, and later ones add as usual. That saves a pass over every
// gradient (the fill) and the read of the old values, the passes PyTorch's
// own optimizers avoid with zero_grad(set_to_none=True).
//
// A kernel that can write a whole gradient itself (fp8_linear.cc's weight
// gradient) asks takeStaleGradient(param): a defined tensor (of the
// parameter's shape, in the buffer's dtype) means the gradient is its to
// write there, no longer stale, and the kernel returns no gradient for
// that input (autograd's accumulator then adds nothing; the owner's hooks
// still run). An undefined one leaves the gradient to autograd. The owner
// clears what stays stale (an unused parameter) before anyone reads it.
#pragma once

#include <torch/torch.h>

namespace dtrain::models {

class GradientSlot {
 public:
  virtual ~GradientSlot() = default;
  // The buffer to write the whole gradient into, no longer stale; or
  // undefined when the gradient is not stale (add it as usual).
  virtual torch::Tensor takeStale() = 0;
};

// Registered slots, keyed by the parameter's TensorImpl; the owner
// registers them at construction and removes them before they die.
void registerGradientSlot(const torch::Tensor& param, GradientSlot* slot);
void unregisterGradientSlot(const torch::Tensor& param, const GradientSlot* slot);

// The registered slot's takeStale(), or undefined for a parameter without
// one. Only from a backward's kernels (a sharded owner starts its
// backward's bookkeeping here when no gradient came before).
torch::Tensor takeStaleGradient(const torch::Tensor& param);

// The gradient gᵀ x of the weight W of a product x Wᵀ (g [M, N], x [M, K],
// both of the product's dtype), for a backward to return: written straight
// into W's stale gradient where its owner lets it (then undefined is
// returned: nothing left for autograd to add), else returned in W's dtype.
// A 16-bit product for an fp32 W is written in fp32 by the matrix product
// itself where libtorch can (compat::productInto), so no 16-bit gradient is
// made and then cast or added.
torch::Tensor weightGradient(const torch::Tensor& g, const torch::Tensor& x, const torch::Tensor& weight);

}  // namespace dtrain::models
