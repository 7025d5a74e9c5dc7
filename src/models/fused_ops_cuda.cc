// The gate of the fused path and the helpers its autograd functions share.
#include "models/fused_ops_cuda.h"

#include <c10/cuda/CUDAStream.h>

#include <cstdint>

#include "libtorch/compat.h"
#include "models/fp8_linear.h"
#include "models/fused_kernels_setting.h"
#include "models/fused_ops_support.h"

namespace dtrain::models::fused {

bool compiledIn() { return true; }

bool activeFor(const torch::Tensor& x) { return x.defined() && x.is_cuda() && fusedKernelsSetting(); }

namespace detail {

bool isKernelType(torch::ScalarType t) { return t == torch::kFloat || t == torch::kBFloat16; }

kernels::DType kernelType(torch::ScalarType t) {
  TORCH_CHECK(isKernelType(t), "dtrain fused kernels: no kernel for dtype ", t);
  return t == torch::kFloat ? kernels::DType::kFloat32 : kernels::DType::kBFloat16;
}

kernels::DType kernelType(const torch::Tensor& t) { return kernelType(t.scalar_type()); }

std::optional<torch::ScalarType> autocastType() {
  if (!compat::isAutocastEnabled(c10::DeviceType::CUDA)) return std::nullopt;
  return compat::autocastDtype(c10::DeviceType::CUDA);
}

cudaStream_t streamOf(const torch::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

torch::Tensor workspace(size_t bytes, const torch::Tensor& t) {
  const auto size = static_cast<int64_t>(bytes < 16 ? 16 : bytes);
  return at::empty({size}, t.options().dtype(torch::kByte));
}

torch::Tensor aligned(const torch::Tensor& t) {
  if (!t.defined()) return t;
  if (!t.is_contiguous()) return t.contiguous();
  const bool aligned16 = (reinterpret_cast<uintptr_t>(t.data_ptr()) & 15u) == 0;
  return aligned16 ? t : t.clone(at::MemoryFormat::Contiguous);
}

torch::Tensor amaxSlot(const torch::Tensor& out, bool fp8) {
  if (!fp8 || !notedAbsoluteMaximaEnabled() || !out.defined() || !out.is_cuda() || out.dim() == 0 ||
      !isKernelType(out.scalar_type())) {
    return {};
  }
  const int64_t cols = out.size(-1);
  if (cols == 0 || cols % 16 != 0 || (out.numel() / cols) % 16 != 0 || out.numel() == 0) return {};
  return at::zeros({1}, out.options().dtype(torch::kInt));
}

void noteAmax(const torch::Tensor& out, const torch::Tensor& slot) {
  if (slot.defined()) noteAbsoluteMaximum(out, slot);
}

}  // namespace detail
}  // namespace dtrain::models::fused
