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
      db = biasGradient(g, static_cast<torch::ScalarType>(ctx->saved_data["bias_dtype"].toInt()));
    }
    return {dx, dw, db};
  }
};

// x Wᵢᵀ for two or three weights over one input x [M, K] (Llama's q, k, v;
// gate and up): the products as libtorch's, and in backward one d(x) made by
// the products themselves (dx = g₀W₀, then += gᵢWᵢ with beta 1) instead of
// separate ones that autograd then adds. w2 is empty for two weights.
class FusedSharedInputLinearsFunction : public torch::autograd::Function<FusedSharedInputLinearsFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w0,
                               const torch::Tensor& w1, const torch::Tensor& w2) {
    KernelScope scope(x);
    const int n = w2.numel() > 0 ? 3 : 2;
    const torch::Tensor weights[] = {w0, w1, w2};
    variable_list outs, cast{x};
    for (int i = 0; i < n; ++i) {
      const torch::Tensor w = weights[i].to(x.scalar_type());
      outs.push_back(torch::mm(x, w.t()));
      cast.push_back(w);
    }
    ctx->save_for_backward(cast);
    // An output that reaches no loss gets no gradient (not zeros), and so
    // its weight none.
    ctx->set_materialize_grads(false);
    // The parameters themselves, for their gradients' slots.
    for (int i = 0; i < n; ++i) ctx->saved_data["weight" + std::to_string(i)] = weights[i];
    return outs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    KernelScope scope(x);
    const int n = static_cast<int>(saved.size()) - 1;
    variable_list out(4);
    torch::Tensor dx;
    for (int i = 0; i < n; ++i) {
      if (!grads[i].defined()) continue;  // an output that reached no loss
      const torch::Tensor g = grads[i].to(x.scalar_type()).contiguous();
      if (ctx->needs_input_grad(0)) {
        if (dx.defined()) {
          dx.addmm_(g, saved[1 + i]);
        } else {
          dx = torch::mm(g, saved[1 + i]);
        }
      }
      if (ctx->needs_input_grad(1 + i)) {
        out[1 + i] = models::weightGradient(g, x, ctx->saved_data["weight" + std::to_string(i)].toTensor());
      }
    }
    out[0] = dx;
    return out;
  }
};

}  // namespace

std::optional<std::vector<torch::Tensor>> sharedInputLinears(const torch::Tensor& x,
                                                             const std::vector<torch::Tensor>& weights) {
  if (!activeFor(x) || !fusedProductsSetting() || x.dim() < 2 || x.numel() == 0 || weights.size() < 2 ||
      weights.size() > 3) {
    return std::nullopt;
  }
  for (const torch::Tensor& w : weights) {
    if (!w.defined() || w.dim() != 2 || w.size(1) != x.size(-1) || !w.is_floating_point() ||
        w.device() != x.device()) {
      return std::nullopt;
    }
  }
  const std::optional<torch::ScalarType> autocast = autocastType();
  if (!autocast || *autocast != torch::kBFloat16) return std::nullopt;
  const torch::Tensor flat = aligned(x.reshape({-1, x.size(-1)}).to(*autocast));
  const torch::Tensor third = weights.size() == 3 ? weights[2] : at::empty({0}, flat.options());
  const variable_list flats = FusedSharedInputLinearsFunction::apply(flat, weights[0], weights[1], third);
  std::vector<torch::Tensor> outs;
  for (size_t i = 0; i < weights.size(); ++i) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = weights[i].size(0);
    outs.push_back(flats[i].view(shape));
  }
  return outs;
}

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

torch::Tensor detail::biasGradient(const torch::Tensor& g, torch::ScalarType bias_dtype) {
  const bool takes = isKernelType(g.scalar_type()) && isKernelType(bias_dtype) &&
                     !(g.scalar_type() == torch::kFloat && bias_dtype == torch::kBFloat16) && g.dim() == 2 &&
                     g.is_contiguous() && g.size(1) < (int64_t{1} << 31);
  if (!takes) return g.sum(0, /*keepdim=*/false, torch::kFloat).to(bias_dtype);
  torch::Tensor db = at::empty({g.size(1)}, g.options().dtype(bias_dtype));
  const size_t bytes = kernels::bias_grad_workspace_size(g.size(0), static_cast<int>(g.size(1)));
  const torch::Tensor ws = workspace(bytes, g);
  DTRAIN_CUDA_CHECK(kernels::bias_grad(db.data_ptr(), /*accumulate=*/false, ws.data_ptr(), bytes, g.data_ptr(),
                                       g.size(0), static_cast<int>(g.size(1)), kernelType(g), kernelType(bias_dtype),
                                       streamOf(g)));
  return db;
}

torch::Tensor detail::product(const torch::Tensor& x, const torch::Tensor& weight) {
  if (!fusedProductsSetting()) return torch::mm(x, weight.to(x.scalar_type()).t());
  return FusedLinearFunction::apply(x, weight, at::empty({0}, x.options()));
}

}  // namespace dtrain::models::fused
