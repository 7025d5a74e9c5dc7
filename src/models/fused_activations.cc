// Bias + GELU (alone, and with the projection after it), SwiGLU and rotary
// embeddings as autograd functions over the fused kernels (activation.h,
// rope.h).
#include "models/fp8_linear.h"
#include "models/fused_kernels_setting.h"
#include "models/fused_ops_cuda.h"
#include "models/fused_ops_support.h"
#include "models/gradient_slot.h"

namespace dtrain::models::fused {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using namespace detail;

// dh (and dbias, when bias is not empty) of y = gelu(h + bias) for dy; with
// y defined, the kernel also writes gelu(h + bias) into it again.
struct GeluGrads {
  torch::Tensor dh, dbias;
};
GeluGrads geluBackward(const torch::Tensor& h, const torch::Tensor& bias, const torch::Tensor& dy,
                       const torch::Tensor& y) {
  const bool has_bias = bias.numel() > 0;
  GeluGrads g{at::empty(h.sizes(), h.options()),
              has_bias ? at::empty(bias.sizes(), bias.options()) : torch::Tensor()};
  const int64_t rows = h.size(0);
  const int cols = static_cast<int>(h.size(1));
  const size_t ws_bytes = has_bias ? kernels::gelu_backward_workspace_size(rows, cols) : 0;
  const torch::Tensor ws = workspace(ws_bytes, h);
  DTRAIN_CUDA_CHECK(kernels::gelu_backward(g.dh.data_ptr(), mutablePtr(g.dbias), /*accumulate=*/false, ws.data_ptr(),
                                           ws_bytes, dy.data_ptr(), h.data_ptr(), has_bias ? bias.data_ptr() : nullptr,
                                           rows, cols, kernelType(h), has_bias ? kernelType(bias) : kernelType(h),
                                           streamOf(h), mutablePtr(y)));
  return g;
}

// y = gelu(h + bias) over h [rows, cols] (the fc product without its bias)
// and bias [cols] (empty: none; libtorch 2.x refuses undefined inputs to a
// custom function). Saves h and bias; backward recomputes.
class FusedGeluFunction : public torch::autograd::Function<FusedGeluFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& h, const torch::Tensor& bias) {
    KernelScope scope(h);
    const torch::Tensor y = at::empty(h.sizes(), h.options());
    const bool has_bias = bias.numel() > 0;
    const kernels::DType param = has_bias ? kernelType(bias) : kernelType(h);
    DTRAIN_CUDA_CHECK(kernels::gelu_forward(y.data_ptr(), h.data_ptr(), has_bias ? bias.data_ptr() : nullptr,
                                            h.size(0), static_cast<int>(h.size(1)), kernelType(h), param,
                                            streamOf(h)));
    ctx->save_for_backward({h, bias});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &h = saved[0], &bias = saved[1];
    KernelScope scope(h);
    const GeluGrads g = geluBackward(h, bias, aligned(grads[0].to(h.scalar_type())), /*y=*/torch::Tensor());
    return {g.dh, g.dbias};
  }
};

// out = gelu(h + fc_bias) Wᵀ + bias over h [rows, ffn] (the fc product
// without its bias), W [dim, ffn] and bias [dim] (empty: none), the
// parameters as they are (any float dtype, cast to h's inside; W's gradient
// through models::weightGradient, the bias's by the bias_grad kernel):
// GPT-2's MLP after its first matmul. The
// GELU's output, the largest activation of the block, is not kept: the
// backward writes it again beside dh, in the same pass over h.
class FusedGeluLinearFunction : public torch::autograd::Function<FusedGeluLinearFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& h, const torch::Tensor& fc_bias,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    KernelScope scope(h);
    torch::Tensor a = at::empty(h.sizes(), h.options());
    const bool has_fc_bias = fc_bias.numel() > 0;
    DTRAIN_CUDA_CHECK(kernels::gelu_forward(a.data_ptr(), h.data_ptr(), has_fc_bias ? fc_bias.data_ptr() : nullptr,
                                            h.size(0), static_cast<int>(h.size(1)), kernelType(h),
                                            has_fc_bias ? kernelType(fc_bias) : kernelType(h), streamOf(h)));
    const torch::Tensor w = weight.to(h.scalar_type());
    const torch::Tensor out =
        bias.numel() > 0 ? torch::addmm(bias.to(h.scalar_type()), a, w.t()) : torch::mm(a, w.t());
    ctx->save_for_backward({h, fc_bias, w});
    // The parameter itself, for its gradient's slot (gradient_slot.h).
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["has_bias"] = bias.numel() > 0;
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.scalar_type());
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &h = saved[0], &fc_bias = saved[1], &weight = saved[2];
    KernelScope scope(h);
    const torch::Tensor dout = aligned(grads[0].to(h.scalar_type()));
    const torch::Tensor da = aligned(torch::mm(dout, weight));
    const torch::Tensor a = at::empty(h.sizes(), h.options());
    const GeluGrads g = geluBackward(h, fc_bias, da, a);
    torch::Tensor dweight;
    if (ctx->needs_input_grad(2)) {
      const torch::Tensor weight_param = ctx->saved_data["weight"].toTensor();
      dweight = fusedProductsSetting() ? models::weightGradient(dout, a, weight_param)
                                       : torch::mm(dout.t(), a).to(weight_param.scalar_type());
    }
    const torch::Tensor dbias =
        ctx->saved_data["has_bias"].toBool()
            ? biasGradient(dout, static_cast<torch::ScalarType>(ctx->saved_data["bias_dtype"].toInt()))
            : torch::Tensor();
    return {g.dh, g.dbias, dweight, dbias};
  }
};

// y = silu(gate) * up over two [rows, ffn] tensors of one dtype.
class FusedSwigluFunction : public torch::autograd::Function<FusedSwigluFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up) {
    KernelScope scope(gate);
    const int64_t ffn = gate.size(-1), rows = gate.numel() / ffn;
    const torch::Tensor y = at::empty(gate.sizes(), gate.options());
    // y feeds the down projection: under FP8 its cast takes the maximum written here.
    const bool fp8 = Fp8Scope::active();
    const torch::Tensor y_amax = amaxSlot(y, fp8);
    DTRAIN_CUDA_CHECK(kernels::swiglu_forward(y.data_ptr(), gate.data_ptr(), up.data_ptr(), rows,
                                              static_cast<int>(ffn), ffn, kernelType(gate), streamOf(gate),
                                              amaxBits(y_amax)));
    noteAmax(y, y_amax);
    ctx->save_for_backward({gate, up});
    ctx->saved_data["fp8"] = fp8;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &gate = saved[0], &up = saved[1];
    KernelScope scope(gate);
    const int64_t ffn = gate.size(-1), rows = gate.numel() / ffn;
    const torch::Tensor dy = aligned(grads[0].to(gate.scalar_type()));
    const torch::Tensor dgate = at::empty(gate.sizes(), gate.options());
    const torch::Tensor dup = at::empty(up.sizes(), up.options());
    // dgate and dup are the gate and up projections' output gradients,
    // which FP8 casts to e5m2 when the forward ran in an Fp8Scope (this
    // thread, autograd's, has none open).
    const bool fp8 = ctx->saved_data["fp8"].toBool();
    const torch::Tensor dgate_amax = amaxSlot(dgate, fp8), dup_amax = amaxSlot(dup, fp8);
    DTRAIN_CUDA_CHECK(kernels::swiglu_backward(dgate.data_ptr(), dup.data_ptr(), dy.data_ptr(), gate.data_ptr(),
                                               up.data_ptr(), rows, static_cast<int>(ffn), ffn, ffn,
                                               kernelType(gate), streamOf(gate), amaxBits(dgate_amax),
                                               amaxBits(dup_amax)));
    noteAmax(dgate, dgate_amax);
    noteAmax(dup, dup_amax);
    return {dgate, dup};
  }
};

// Rotates x [batch, seq, heads, head_dim] at positions 0..seq-1 of every
// sequence by the angles position * inv_freq (rope.h: Meta's adjacent pairs).
class FusedRotaryFunction : public torch::autograd::Function<FusedRotaryFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& inv_freq) {
    KernelScope scope(x);
    const torch::Tensor out = at::empty(x.sizes(), x.options());
    DTRAIN_CUDA_CHECK(kernels::rope_forward(args(x, out, inv_freq), streamOf(x)));
    ctx->save_for_backward({inv_freq});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor inv_freq = ctx->get_saved_variables()[0];
    const torch::Tensor dout = aligned(grads[0]);
    KernelScope scope(dout);
    const torch::Tensor dx = at::empty(dout.sizes(), dout.options());
    // The rotation by -angle: the transpose of forward's.
    DTRAIN_CUDA_CHECK(kernels::rope_backward(args(dout, dx, inv_freq), streamOf(dout)));
    return {dx, torch::Tensor()};
  }

 private:
  static kernels::RopeArgs args(const torch::Tensor& in, const torch::Tensor& out, const torch::Tensor& inv_freq) {
    kernels::RopeArgs r;
    r.q.in = in.data_ptr();
    r.q.out = out.data_ptr();
    r.q.heads = static_cast<int>(in.size(2));
    r.inv_freq = inv_freq.data_ptr<float>();
    r.tokens = in.size(0) * in.size(1);
    r.seq_len = static_cast<int>(in.size(1));
    r.head_dim = static_cast<int>(in.size(3));
    r.dtype = kernelType(in);
    return r;
  }
};

}  // namespace

std::optional<torch::Tensor> linearGelu(const torch::Tensor& x, const torch::Tensor& weight,
                                        const torch::Tensor& bias) {
  if (!activeFor(x) || x.dim() == 0 || x.numel() == 0 || weight.dim() != 2 || weight.size(1) != x.size(-1)) {
    return std::nullopt;
  }
  // The product's dtype: autocast's (bf16 only), else the inputs' own.
  const std::optional<torch::ScalarType> autocast = autocastType();
  const torch::ScalarType act = autocast ? *autocast : x.scalar_type();
  if (act != torch::kBFloat16 && (autocast || act != torch::kFloat)) return std::nullopt;
  if (!autocast && weight.scalar_type() != act) return std::nullopt;
  if (bias.defined() && (!isKernelType(bias.scalar_type()) || bias.numel() != weight.size(0))) return std::nullopt;
  const torch::Tensor h = product(aligned(x.reshape({-1, x.size(-1)}).to(act)), weight);
  // fp32 activations take an fp32 bias; bf16 ones keep the bias's own dtype
  // (an fp32 master bias is added in fp32 inside the kernel).
  const torch::Tensor b = bias.defined() ? aligned(act == torch::kFloat ? bias.to(torch::kFloat) : bias)
                                          : at::empty({0}, h.options());
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = weight.size(0);
  return FusedGeluFunction::apply(aligned(h), b).view(shape);
}

std::optional<torch::Tensor> geluMlp(const torch::Tensor& x, const torch::Tensor& fc_weight,
                                     const torch::Tensor& fc_bias, const torch::Tensor& proj_weight,
                                     const torch::Tensor& proj_bias) {
  if (!activeFor(x) || x.dim() == 0 || x.numel() == 0 || fc_weight.dim() != 2 || fc_weight.size(1) != x.size(-1) ||
      proj_weight.dim() != 2 || proj_weight.size(1) != fc_weight.size(0)) {
    return std::nullopt;
  }
  const std::optional<torch::ScalarType> autocast = autocastType();
  const torch::ScalarType act = autocast ? *autocast : x.scalar_type();
  if (act != torch::kBFloat16 && (autocast || act != torch::kFloat)) return std::nullopt;
  if (!autocast && (fc_weight.scalar_type() != act || proj_weight.scalar_type() != act)) return std::nullopt;
  if (fc_bias.defined() && (!isKernelType(fc_bias.scalar_type()) || fc_bias.numel() != fc_weight.size(0))) {
    return std::nullopt;
  }
  if (proj_bias.defined() && proj_bias.numel() != proj_weight.size(0)) return std::nullopt;
  const torch::Tensor h = product(aligned(x.reshape({-1, x.size(-1)}).to(act)), fc_weight);
  const torch::Tensor b = fc_bias.defined() ? aligned(act == torch::kFloat ? fc_bias.to(torch::kFloat) : fc_bias)
                                            : at::empty({0}, h.options());
  // The projection's weight and bias as they are (cast to the activations'
  // dtype inside, as autocast's addmm would take them; their gradients come
  // back in their own dtypes).
  const torch::Tensor pb = proj_bias.defined() ? proj_bias : at::empty({0}, h.options());
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = proj_weight.size(0);
  return FusedGeluLinearFunction::apply(aligned(h), b, proj_weight, pb).view(shape);
}

std::optional<torch::Tensor> swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  if (!activeFor(gate) || gate.dim() == 0 || gate.numel() == 0 || !isKernelType(gate.scalar_type()) ||
      up.scalar_type() != gate.scalar_type() || up.sizes() != gate.sizes() || up.device() != gate.device()) {
    return std::nullopt;
  }
  return FusedSwigluFunction::apply(aligned(gate), aligned(up));
}

std::optional<torch::Tensor> applyRotary(const torch::Tensor& x, const ops::RotaryTable& table) {
  const torch::Tensor& inv_freq = table.inv_freq;
  if (!activeFor(x) || x.dim() != 4 || x.numel() == 0 || !isKernelType(x.scalar_type()) || x.size(3) % 2 != 0 ||
      !inv_freq.defined() || inv_freq.scalar_type() != torch::kFloat || inv_freq.device() != x.device() ||
      inv_freq.numel() != x.size(3) / 2 || table.cos.scalar_type() == torch::kDouble || x.size(1) > table.cos.size(0)) {
    return std::nullopt;
  }
  return FusedRotaryFunction::apply(aligned(x), aligned(inv_freq));
}

}  // namespace dtrain::models::fused
