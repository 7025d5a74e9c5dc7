// What the autograd functions over the fused kernels share (fused_*.cc;
// CUDA builds of libtorch only): dtypes, streams, workspaces, alignment.
#pragma once

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/torch.h>

#include <optional>

#include "gpu/cuda_check.h"
#include "models/kernels/kernels.h"

namespace dtrain::models::fused::detail {

// fp32 and bf16: the dtypes the kernels take.
bool isKernelType(torch::ScalarType t);
kernels::DType kernelType(torch::ScalarType t);  // TORCH_CHECK: fp32 or bf16
kernels::DType kernelType(const torch::Tensor& t);

// CUDA autocast's dtype while it is enabled.
std::optional<torch::ScalarType> autocastType();

// The current stream of t's device: where forward and (the engine sets it
// to the forward's) backward enqueue.
cudaStream_t streamOf(const torch::Tensor& t);

// `bytes` of scratch on t's device from the caching allocator (at least 16,
// 256-byte aligned).
torch::Tensor workspace(size_t bytes, const torch::Tensor& t);

// t contiguous and 16-byte aligned (a copy when it is not), so the kernels
// take their vector path; undefined stays undefined.
torch::Tensor aligned(const torch::Tensor& t);

// A raw pointer, null for an undefined tensor.
inline const void* ptr(const torch::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
inline void* mutablePtr(const torch::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// Absolute maxima written by the kernels beside their outputs, for the FP8
// casts of those outputs (fp8_linear.h's noteAbsoluteMaximum):
// - amaxSlot(out, fp8): a zeroed int32 on out's device for the kernel's
//   amax_bits, when an FP8 product may cast out: `fp8` (in forward,
//   Fp8Scope::active(); in backward, whether the forward ran in a scope:
//   backward runs on autograd's threads, outside the scope), notes
//   enabled, out CUDA, fp32 or bf16, its rows (elements / last dimension)
//   and columns multiples of 16 (the transposing cast's condition). Else
//   undefined, and the kernel runs without one.
// - amaxBits(slot): the pointer the kernels take (null for an undefined slot).
// - noteAmax(out, slot): after the launch that wrote out and slot, notes
//   slot as out's absolute maximum (nothing for an undefined slot).
torch::Tensor amaxSlot(const torch::Tensor& out, bool fp8);
inline uint32_t* amaxBits(const torch::Tensor& slot) {
  return slot.defined() ? reinterpret_cast<uint32_t*>(slot.data_ptr<int32_t>()) : nullptr;
}
void noteAmax(const torch::Tensor& out, const torch::Tensor& slot);

// x Wᵀ for x [M, K] contiguous in the product's dtype and W [N, K] of any
// float dtype (cast inside): with DTRAIN_FUSED_PRODUCTS on, fused_linear.cc's
// function (W's gradient written in fp32 straight into its buffer), else
// torch::mm of the cast weight. For the fused functions that take a product
// without its bias (linearGelu, geluMlp).
torch::Tensor product(const torch::Tensor& x, const torch::Tensor& weight);

// The bias gradient of a product whose output gradient is g [M, N]
// (contiguous): the column sums, in fp32, returned in `bias_dtype`; by the
// bias_grad kernel where it takes the dtypes, else by torch's sum.
torch::Tensor biasGradient(const torch::Tensor& g, torch::ScalarType bias_dtype);

// Inside an autograd function: launches go to t's device, and autocast stays
// out of the torch operations (their dtypes are chosen before the call).
class KernelScope {
 public:
  explicit KernelScope(const torch::Tensor& t) : device_(t.device()), no_autocast_(c10::autocast_dispatch_keyset) {}

 private:
  c10::cuda::CUDAGuard device_;
  c10::impl::ExcludeDispatchKeyGuard no_autocast_;
};

}  // namespace dtrain::models::fused::detail
