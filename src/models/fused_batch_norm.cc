// Batch norm (+ residual add) (+ ReLU) over channels-last activations as an
// autograd function over the fused kernels (batch_norm.h).
#include <cstdint>

#include "models/fused_ops_cuda.h"
#include "models/fused_ops_support.h"

namespace dtrain::models::fused {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using namespace detail;

// [rows, channels] with channels contiguous: a 4-D NCHW tensor in the
// channels-last memory format, or a 2-D [N, C] contiguous one.
bool channelsInnermost(const torch::Tensor& t) {
  if (t.dim() == 4) return t.is_contiguous(at::MemoryFormat::ChannelsLast);
  return t.dim() == 2 && t.is_contiguous();
}

// t (a gradient) as x's layout and dtype: channels innermost.
torch::Tensor likeInput(const torch::Tensor& t, const torch::Tensor& x) {
  torch::Tensor out = t.to(x.scalar_type());
  if (x.dim() == 4) return out.contiguous(at::MemoryFormat::ChannelsLast);
  return out.contiguous();
}

// Inputs x (channels innermost, fp32 or bf16), residual (empty: no add;
// else x's shape, dtype and layout), weight and bias (fp32), running_mean
// and running_var (fp32, updated in place in training; they are buffers,
// never differentiated). Absent inputs are empty tensors, not undefined
// ones: libtorch 2.x records the device of every input of a custom
// function and refuses an undefined one. Output y in x's dtype and layout.
class FusedBatchNormFunction : public torch::autograd::Function<FusedBatchNormFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& residual,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& running_mean, const torch::Tensor& running_var, bool training,
                               double momentum, double eps, bool relu) {
    KernelScope scope(x);
    const bool has_residual = residual.numel() > 0;
    const int channels = static_cast<int>(x.size(1));
    const int64_t rows = x.numel() / channels;
    const auto stats = x.options().dtype(torch::kFloat);
    // empty_like keeps x's strides (channels-last stays channels-last).
    const torch::Tensor y = at::empty_like(x);
    const torch::Tensor save_mean = at::empty({channels}, stats);
    const torch::Tensor save_invstd = at::empty({channels}, stats);
    const size_t ws_bytes = kernels::batch_norm_workspace_size(rows, channels);
    const torch::Tensor ws = workspace(ws_bytes, x);
    kernels::BatchNormForwardArgs a;
    a.x = x.data_ptr();
    a.residual = has_residual ? residual.data_ptr() : nullptr;
    a.weight = weight.data_ptr<float>();
    a.bias = bias.data_ptr<float>();
    a.y = y.data_ptr();
    a.running_mean = running_mean.data_ptr<float>();
    a.running_var = running_var.data_ptr<float>();
    a.save_mean = save_mean.data_ptr<float>();
    a.save_invstd = save_invstd.data_ptr<float>();
    a.workspace = ws.data_ptr();
    a.workspace_bytes = ws_bytes;
    a.rows = rows;
    a.channels = channels;
    a.eps = static_cast<float>(eps);
    a.momentum = static_cast<float>(momentum);
    a.training = training;
    a.relu = relu;
    a.act_dtype = kernelType(x);
    DTRAIN_CUDA_CHECK(kernels::batch_norm_forward(a, streamOf(x)));
    // ReLU's mask: after a residual add, y (an output: saving it costs no
    // copy); without one, recomputed from x and bias (one read less).
    const bool mask_from_y = relu && has_residual;
    ctx->save_for_backward({x, mask_from_y ? y : torch::Tensor(), weight, save_mean, save_invstd,
                            relu && !has_residual ? bias : torch::Tensor()});
    ctx->saved_data["training"] = training;
    ctx->saved_data["relu"] = relu;
    ctx->saved_data["residual"] = has_residual;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &y = saved[1], &weight = saved[2], &mean = saved[3], &invstd = saved[4],
                        &bias = saved[5];
    const bool training = ctx->saved_data["training"].toBool();
    const bool relu = ctx->saved_data["relu"].toBool();
    const bool has_residual = ctx->saved_data["residual"].toBool();
    KernelScope scope(x);
    const int channels = static_cast<int>(x.size(1));
    const int64_t rows = x.numel() / channels;
    const torch::Tensor dy = grads[0].defined() ? likeInput(grads[0], x) : at::zeros_like(x);
    const torch::Tensor dx = at::empty_like(x);
    // Without ReLU the residual's gradient is dy itself: nothing to write.
    const torch::Tensor dresidual = has_residual && relu ? at::empty_like(x) : torch::Tensor();
    const torch::Tensor dweight = at::empty({channels}, weight.options());
    const torch::Tensor dbias = at::empty({channels}, weight.options());
    const size_t ws_bytes = kernels::batch_norm_workspace_size(rows, channels);
    const torch::Tensor ws = workspace(ws_bytes, x);
    kernels::BatchNormBackwardArgs a;
    a.dy = dy.data_ptr();
    a.y = ptr(y);
    a.bias = bias.defined() ? bias.data_ptr<float>() : nullptr;
    a.x = x.data_ptr();
    a.weight = weight.data_ptr<float>();
    a.mean = mean.data_ptr<float>();
    a.invstd = invstd.data_ptr<float>();
    a.dx = dx.data_ptr();
    a.dresidual = mutablePtr(dresidual);
    a.dweight = dweight.data_ptr<float>();
    a.dbias = dbias.data_ptr<float>();
    a.workspace = ws.data_ptr();
    a.workspace_bytes = ws_bytes;
    a.rows = rows;
    a.channels = channels;
    a.training = training;
    a.relu = relu;
    a.act_dtype = kernelType(x);
    DTRAIN_CUDA_CHECK(kernels::batch_norm_backward(a, streamOf(x)));
    torch::Tensor dres;
    if (has_residual) dres = relu ? dresidual : dy;
    return {dx,              dres,            dweight,         dbias,           torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

bool fp32OrLike(const torch::Tensor& p, const torch::Tensor& x) {
  return p.defined() && (p.scalar_type() == torch::kFloat || p.scalar_type() == x.scalar_type());
}

bool fp32Vector(const torch::Tensor& t, int64_t channels, const torch::Tensor& x) {
  return t.defined() && t.scalar_type() == torch::kFloat && t.dim() == 1 && t.size(0) == channels &&
         t.is_contiguous() && t.device() == x.device();
}

}  // namespace

std::optional<torch::Tensor> batchNormAct(const torch::Tensor& x, const torch::Tensor& residual,
                                          const torch::Tensor& weight, const torch::Tensor& bias,
                                          torch::Tensor& running_mean, torch::Tensor& running_var, bool training,
                                          double momentum, double eps, bool relu) {
  if (!activeFor(x) || (x.dim() != 4 && x.dim() != 2) || x.numel() == 0 || !isKernelType(x.scalar_type()) ||
      !channelsInnermost(x)) {
    return std::nullopt;
  }
  const int64_t channels = x.size(1);
  const int64_t rows = x.numel() / channels;
  // One value per channel in training: libtorch's error, not the kernel's.
  if (channels > INT32_MAX || (training && rows < 2)) return std::nullopt;
  if (!fp32OrLike(weight, x) || !fp32OrLike(bias, x) || weight.numel() != channels || bias.numel() != channels ||
      weight.device() != x.device() || bias.device() != x.device()) {
    return std::nullopt;
  }
  if (!fp32Vector(running_mean, channels, x) || !fp32Vector(running_var, channels, x)) return std::nullopt;
  if (residual.defined() && (residual.sizes() != x.sizes() || residual.scalar_type() != x.scalar_type() ||
                             residual.device() != x.device() || residual.strides() != x.strides())) {
    return std::nullopt;
  }
  // The parameters in fp32 (a bf16 weight is widened, exactly; its gradient
  // flows back through the cast).
  const torch::Tensor absent = at::empty({0}, x.options());
  return FusedBatchNormFunction::apply(x, residual.defined() ? residual : absent,
                                       weight.to(torch::kFloat).contiguous(), bias.to(torch::kFloat).contiguous(),
                                       running_mean, running_var, training, momentum, eps, relu);
}

}  // namespace dtrain::models::fused
