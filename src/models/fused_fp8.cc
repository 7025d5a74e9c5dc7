// fp8Cast over models/kernels/fp8_cast.h (fused_ops_cuda.h).
#include "libtorch/compat.h"
#include "models/fused_ops_cuda.h"
#include "models/fused_ops_support.h"

namespace dtrain::models::fused {

using namespace detail;

std::optional<Fp8Cast> fp8Cast(const torch::Tensor& x, bool e5m2) {
  if (!compat::kHasScaledMm || !activeFor(x) || x.numel() == 0 || !isKernelType(x.scalar_type())) {
    return std::nullopt;
  }
  const KernelScope scope(x);
  const torch::Tensor in = aligned(x);
  Fp8Cast out;
  out.data = at::empty(in.sizes(), in.options().dtype(e5m2 ? compat::float8E5m2() : compat::float8E4m3()));
  out.scale = at::empty({}, in.options().dtype(torch::kFloat));
  out.inverse = at::empty({}, in.options().dtype(torch::kFloat));
  const torch::Tensor scratch = workspace(kernels::fp8_cast_workspace_size(in.numel()), in);
  DTRAIN_CUDA_CHECK(kernels::fp8_cast(out.data.data_ptr(), out.scale.data_ptr<float>(), out.inverse.data_ptr<float>(),
                                      in.data_ptr(), kernelType(in), in.numel(),
                                      e5m2 ? kernels::Fp8Format::kE5M2 : kernels::Fp8Format::kE4M3,
                                      scratch.data_ptr(), streamOf(in)));
  return out;
}

std::optional<Fp8Cast> fp8CastTransposed(const torch::Tensor& x, bool e5m2, const torch::Tensor& amax_bits) {
  if (!compat::kHasScaledMm || !activeFor(x) || x.dim() != 2 || x.size(0) % 16 != 0 || x.size(1) % 16 != 0 ||
      x.numel() == 0 || !isKernelType(x.scalar_type())) {
    return std::nullopt;
  }
  const KernelScope scope(x);
  const torch::Tensor in = aligned(x);
  const auto type = e5m2 ? compat::float8E5m2() : compat::float8E4m3();
  Fp8Cast out;
  out.data = at::empty(in.sizes(), in.options().dtype(type));
  out.transposed = at::empty({in.size(1), in.size(0)}, in.options().dtype(type));
  out.scale = at::empty({}, in.options().dtype(torch::kFloat));
  out.inverse = at::empty({}, in.options().dtype(torch::kFloat));
  const bool noted = amax_bits.defined();
  if (noted && (amax_bits.scalar_type() != torch::kInt || amax_bits.numel() != 1 || amax_bits.device() != in.device())) {
    return std::nullopt;
  }
  const torch::Tensor scratch =
      noted ? torch::Tensor() : workspace(kernels::fp8_cast_workspace_size(in.numel()), in);
  DTRAIN_CUDA_CHECK(kernels::fp8_cast_transposed(
      out.data.data_ptr(), out.transposed.data_ptr(), out.scale.data_ptr<float>(), out.inverse.data_ptr<float>(),
      in.data_ptr(), kernelType(in), in.size(0), in.size(1), e5m2 ? kernels::Fp8Format::kE5M2 : kernels::Fp8Format::kE4M3,
      noted ? nullptr : scratch.data_ptr(), streamOf(in),
      noted ? reinterpret_cast<const uint32_t*>(amax_bits.data_ptr<int32_t>()) : nullptr));
  return out;
}

std::optional<Fp8Cast> fp8CastAxiswise(const torch::Tensor& x) {
  if (!compat::kHasScaledMm || !activeFor(x) || x.dim() != 2 || x.size(0) % 16 != 0 || x.size(1) % 16 != 0 ||
      x.numel() == 0 || !isKernelType(x.scalar_type())) {
    return std::nullopt;
  }
  const KernelScope scope(x);
  const torch::Tensor in = aligned(x);
  const auto type = compat::float8E4m3();
  const int64_t rows = in.size(0), cols = in.size(1);
  Fp8Cast out;
  out.data = at::empty(in.sizes(), in.options().dtype(type));
  out.transposed = at::empty({cols, rows}, in.options().dtype(type));
  out.inverse = at::empty({rows}, in.options().dtype(torch::kFloat));
  out.transposed_inverse = at::empty({cols}, in.options().dtype(torch::kFloat));
  const torch::Tensor scratch = workspace(kernels::fp8_cast_axiswise_workspace_size(rows, cols), in);
  DTRAIN_CUDA_CHECK(kernels::fp8_cast_axiswise(out.data.data_ptr(), out.transposed.data_ptr(),
                                               out.inverse.data_ptr<float>(), out.transposed_inverse.data_ptr<float>(),
                                               in.data_ptr(), kernelType(in), rows, cols, scratch.data_ptr(),
                                               streamOf(in)));
  return out;
}

}  // namespace dtrain::models::fused
