// The linear layers' 16-bit products as an autograd function of dtrain's
// own: the same cuBLAS products libtorch's linear runs under autocast, but
// the weight's gradient is written in fp32 straight into the parameter's
// gradient buffer (models/gradient_slot.h's weightGradient) instead of
// leaving as a bf16 tensor that autocast's cast then widens and the
// accumulator copies: two passes over every weight gradient fewer.
#include "models/fused_kernels_setting.h"
#include "models/fused_ops_cuda.h"
#include "models/fused_ops_support.h"
#include "models/gradient_slot.h"

namespace dtrain::models::fused {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using namespace detail;

// x [M, K] of the product's dtype, weight [N, K] of any float dtype (cast
// inside), bias [N] or empty (none: libtorch 2.x refuses undefined inputs to
// a custom function). Saves x and the cast weight, as libtorch's linear.
class FusedLinearFunction : public torch::autograd::Function<FusedLinearFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias) {
    KernelScope scope(x);
    const torch::Tensor w = weight.to(x.scalar_type());
    const bool has_bias = bias.numel() > 0;
    // The bias in the product's epilogue (cuBLASLt), as autocast's addmm.
    torch::Tensor y = has_bias ? torch::addmm(bias.to(x.scalar_type()), x, w.t()) : torch::mm(x, w.t());
    ctx->save_for_backward({x, w});
    // The parameter itself, for its gradient's slot (a leaf, or another
    // function's output: neither holds this node, so no cycle).
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.scalar_type());
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1];
    KernelScope scope(x);
    const torch::Tensor g = grads[0].to(x.scalar_type()).contiguous();
    torch::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) dx = torch::mm(g, w);
    if (ctx->needs_input_grad(1)) dw = models::weightGradient(g, x, ctx->saved_data["weight"].toTensor());
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) {
      db = g.sum(0, /*keepdim=*/false, torch::kFloat)
               .to(static_cast<torch::ScalarType>(ctx->saved_data["bias_dtype"].toInt()));
    }
    return {dx, dw, db};
  }
};

}  // namespace

std::optional<torch::Tensor> linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!activeFor(x) || !fusedProductsSetting() || x.dim() < 2 || x.numel() == 0 || weight.dim() != 2 ||
      weight.size(1) != x.size(-1) || !weight.is_floating_point() || weight.device() != x.device()) {
    return std::nullopt;
  }
  const std::optional<torch::ScalarType> autocast = autocastType();
  if (!autocast || *autocast != torch::kBFloat16) return std::nullopt;
  if (bias.defined() && (bias.numel() != weight.size(0) || !bias.is_floating_point())) return std::nullopt;
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = weight.size(0);
  const torch::Tensor flat = aligned(x.reshape({-1, x.size(-1)}).to(*autocast));
  const torch::Tensor b = bias.defined() ? bias : at::empty({0}, flat.options());
  return FusedLinearFunction::apply(flat, weight, b).view(shape);
}

torch::Tensor detail::product(const torch::Tensor& x, const torch::Tensor& weight) {
  if (!fusedProductsSetting()) return torch::mm(x, weight.to(x.scalar_type()).t());
  return FusedLinearFunction::apply(x, weight, at::empty({0}, x.options()));
}

}  // namespace dtrain::models::fused
