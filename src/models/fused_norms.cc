// Residual add + LayerNorm / RMSNorm as autograd functions over the fused
// kernels (normalization.h).
#include "models/fp8_linear.h"
#include "models/fused_ops_cuda.h"
#include "models/fused_ops_support.h"

namespace dtrain::models::fused {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using namespace detail;

// Inputs x, residual (empty: no add), weight, bias (empty: none; always for
// RMSNorm), all contiguous and aligned. The residual stream (residual, or x
// when there is none) sets the activation dtype; under an fp32 stream x may
// be bf16 (autocast's matmul outputs) and `bf16_y` asks for y in bf16 (it
// feeds autocast's matmuls), so no cast kernel runs on either side. Absent
// inputs are empty tensors, not undefined ones: libtorch 2.x records the
// device of every input of a custom function and refuses an undefined one.
// Outputs y and, with a residual, residual_out = x + residual (the residual
// stream the next block adds to).
class FusedNormFunction : public torch::autograd::Function<FusedNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& residual,
                               const torch::Tensor& weight, const torch::Tensor& bias, double eps, bool rms,
                               bool bf16_y) {
    KernelScope scope(x);
    const bool has_residual = residual.numel() > 0, has_bias = bias.numel() > 0;
    const torch::Tensor& stream_in = has_residual ? residual : x;
    const bool narrow_x = x.scalar_type() != stream_in.scalar_type();
    const int cols = static_cast<int>(x.size(-1));
    const int64_t rows = x.numel() / cols;
    const auto stats = x.options().dtype(torch::kFloat);
    const torch::Tensor y =
        at::empty(x.sizes(), stream_in.options().dtype(bf16_y ? torch::kBFloat16 : stream_in.scalar_type()));
    const torch::Tensor residual_out = has_residual ? at::empty(x.sizes(), stream_in.options()) : torch::Tensor();
    const torch::Tensor mean = rms ? torch::Tensor() : at::empty({rows}, stats);
    const torch::Tensor rstd = at::empty({rows}, stats);
    kernels::NormForwardArgs a;
    a.x = x.data_ptr();
    a.residual = has_residual ? residual.data_ptr() : nullptr;
    a.weight = weight.data_ptr();
    a.bias = has_bias ? bias.data_ptr() : nullptr;
    a.y = y.data_ptr();
    a.residual_out = mutablePtr(residual_out);
    a.mean = mean.defined() ? mean.data_ptr<float>() : nullptr;
    a.rstd = rstd.data_ptr<float>();
    a.rows = rows;
    a.cols = cols;
    a.eps = static_cast<float>(eps);
    a.act_dtype = kernelType(stream_in);
    a.param_dtype = kernelType(weight);
    a.bf16_x = narrow_x;
    a.bf16_y = bf16_y;
    // y (bf16 under bf16_y: the tensor returned as the normed output) feeds
    // the block's projections: under FP8 their cast takes the maximum
    // written here.
    const torch::Tensor y_amax = amaxSlot(y, Fp8Scope::active());
    a.y_amax_bits = amaxBits(y_amax);
    const cudaStream_t stream = streamOf(x);
    DTRAIN_CUDA_CHECK(rms ? kernels::rms_norm_forward(a, stream) : kernels::layer_norm_forward(a, stream));
    noteAmax(y, y_amax);
    // Backward reads what forward normalised: the sum when there was one.
    ctx->save_for_backward({has_residual ? residual_out : x, weight, mean, rstd});
    ctx->saved_data["rms"] = rms;
    ctx->saved_data["residual"] = has_residual;
    ctx->saved_data["bias"] = has_bias;
    ctx->saved_data["narrow_x"] = narrow_x;
    if (has_residual) return {y, residual_out};
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &normed_input = saved[0], &weight = saved[1], &mean = saved[2], &rstd = saved[3];
    const bool rms = ctx->saved_data["rms"].toBool();
    const bool has_residual = ctx->saved_data["residual"].toBool();
    const bool has_bias = ctx->saved_data["bias"].toBool();
    const bool narrow_x = ctx->saved_data["narrow_x"].toBool();
    KernelScope scope(normed_input);
    const torch::ScalarType act = normed_input.scalar_type();
    const int cols = static_cast<int>(normed_input.size(-1));
    const int64_t rows = normed_input.numel() / cols;
    // A bf16 dy under an fp32 stream is read as it is.
    const bool narrow_dy = act == torch::kFloat && grads[0].defined() && grads[0].scalar_type() == torch::kBFloat16;
    const torch::Tensor dy = grads[0].defined() ? aligned(narrow_dy ? grads[0] : grads[0].to(act))
                                                : torch::zeros_like(normed_input);
    // The residual stream's own gradient (from the blocks above) joins dx.
    const torch::Tensor dresidual =
        has_residual && grads.size() > 1 && grads[1].defined() ? aligned(grads[1].to(act)) : torch::Tensor();
    const torch::Tensor dx = at::empty(normed_input.sizes(), normed_input.options());
    const torch::Tensor dx_bf16 =
        narrow_x ? at::empty(normed_input.sizes(), normed_input.options().dtype(torch::kBFloat16)) : torch::Tensor();
    const torch::Tensor dweight = at::empty(weight.sizes(), weight.options());
    const torch::Tensor dbias = has_bias ? at::empty(weight.sizes(), weight.options()) : torch::Tensor();
    const size_t ws_bytes = kernels::norm_backward_workspace_size(rows, cols);
    const torch::Tensor ws = workspace(ws_bytes, normed_input);
    kernels::NormBackwardArgs a;
    a.dy = dy.data_ptr();
    a.x = normed_input.data_ptr();
    a.weight = weight.data_ptr();
    a.mean = mean.defined() ? mean.data_ptr<float>() : nullptr;
    a.rstd = rstd.data_ptr<float>();
    a.dresidual = ptr(dresidual);
    a.dx = dx.data_ptr();
    a.dx_bf16 = mutablePtr(dx_bf16);
    a.dweight = dweight.data_ptr();
    a.dbias = mutablePtr(dbias);
    a.workspace = ws.data_ptr();
    a.workspace_bytes = ws_bytes;
    a.rows = rows;
    a.cols = cols;
    a.act_dtype = kernelType(normed_input);
    a.param_dtype = kernelType(weight);
    a.bf16_dy = narrow_dy;
    const cudaStream_t stream = streamOf(normed_input);
    DTRAIN_CUDA_CHECK(rms ? kernels::rms_norm_backward(a, stream) : kernels::layer_norm_backward(a, stream));
    // dx is the gradient of both x and residual (h = x + residual); a bf16
    // x gets it in bf16.
    return {narrow_x ? dx_bf16 : dx, has_residual ? dx : torch::Tensor(), dweight, dbias, torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

// Whether a row of `cols` fits the kernels (normalization.h's limits, with
// aligned() guaranteeing the vector path whenever cols allows it).
bool rowFits(int64_t cols, torch::ScalarType act) {
  const int64_t vec = act == torch::kFloat ? 4 : 8;
  if (cols % vec == 0) return cols <= (act == torch::kFloat ? 8192 : 16384);
  return cols <= 4096;
}

// The norm in the activation dtype `act` (fp32 activations take fp32
// parameters: a bf16 weight is widened, exactly), or nullopt. With
// `narrow`, an fp32 norm takes a bf16 x (the update) as it is and returns
// y in bf16 (what autocast's matmuls would cast it to).
std::optional<variable_list> runNorm(const torch::Tensor& x, const torch::Tensor& residual,
                                     const torch::Tensor& weight, const torch::Tensor& bias, double eps, bool rms,
                                     torch::ScalarType act, bool narrow = false) {
  if (!weight.defined() || x.dim() == 0 || x.numel() == 0 || !isKernelType(act) ||
      !isKernelType(weight.scalar_type()) || (bias.defined() && !isKernelType(bias.scalar_type())) ||
      !rowFits(x.size(-1), act) || weight.numel() != x.size(-1) || weight.device() != x.device()) {
    return std::nullopt;
  }
  narrow = narrow && act == torch::kFloat;
  const torch::ScalarType x_type =
      narrow && residual.defined() && x.scalar_type() == torch::kBFloat16 ? torch::kBFloat16 : act;
  const torch::ScalarType param = act == torch::kFloat ? torch::kFloat : weight.scalar_type();
  const torch::Tensor absent = at::empty({0}, x.options().dtype(act));
  return FusedNormFunction::apply(aligned(x.to(x_type)), residual.defined() ? aligned(residual.to(act)) : absent,
                                  aligned(weight.to(param)), bias.defined() ? aligned(bias.to(param)) : absent.to(param),
                                  eps, rms, narrow);
}

// Whether the normed output may be narrowed to bf16: under bf16 autocast,
// where the matmuls it feeds would cast it (transformer_ops.h).
bool narrowOutput() { return autocastType() == torch::kBFloat16; }

// LayerNorm's activation dtype: fp32 under autocast (layer_norm is on its
// fp32 list), else the input's.
torch::ScalarType layerNormType(torch::ScalarType input) {
  return autocastType() ? torch::kFloat : input;
}

}  // namespace

std::optional<torch::Tensor> layerNorm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                       double eps) {
  if (!activeFor(x)) return std::nullopt;
  auto out = runNorm(x, torch::Tensor(), weight, bias, eps, false, layerNormType(x.scalar_type()), narrowOutput());
  if (!out) return std::nullopt;
  return (*out)[0];
}

std::optional<ops::ResidualAndNormed> addLayerNorm(const torch::Tensor& residual, const torch::Tensor& update,
                                                   const torch::Tensor& weight, const torch::Tensor& bias,
                                                   double eps) {
  if (!activeFor(residual) || residual.sizes() != update.sizes()) return std::nullopt;
  const torch::ScalarType sum = c10::promoteTypes(residual.scalar_type(), update.scalar_type());
  // Under autocast the libtorch path keeps a narrow sum but normalises in
  // fp32; the kernel does both in one dtype, so it takes fp32 sums only.
  if (layerNormType(sum) != sum) return std::nullopt;
  auto out = runNorm(update, residual, weight, bias, eps, false, sum, narrowOutput());
  if (!out) return std::nullopt;
  return ops::ResidualAndNormed{(*out)[1], (*out)[0]};
}

std::optional<torch::Tensor> rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  if (!activeFor(x) || !weight.defined()) return std::nullopt;
  const bool narrow = narrowOutput() && x.scalar_type() == torch::kFloat;
  auto out = runNorm(x, torch::Tensor(), weight, torch::Tensor(), eps, true, x.scalar_type(), narrow);
  if (!out) return std::nullopt;
  if (narrow) return (*out)[0];
  // The libtorch form multiplies the weight last: its dtype is the promotion of both.
  return (*out)[0].to(c10::promoteTypes(x.scalar_type(), weight.scalar_type()));
}

std::optional<ops::ResidualAndNormed> addRmsNorm(const torch::Tensor& residual, const torch::Tensor& update,
                                                 const torch::Tensor& weight, double eps) {
  if (!activeFor(residual) || !weight.defined() || residual.sizes() != update.sizes()) return std::nullopt;
  const torch::ScalarType sum = c10::promoteTypes(residual.scalar_type(), update.scalar_type());
  const bool narrow = narrowOutput() && sum == torch::kFloat;
  auto out = runNorm(update, residual, weight, torch::Tensor(), eps, true, sum, narrow);
  if (!out) return std::nullopt;
  if (narrow) return ops::ResidualAndNormed{(*out)[1], (*out)[0]};
  return ops::ResidualAndNormed{(*out)[1], (*out)[0].to(c10::promoteTypes(sum, weight.scalar_type()))};
}

}  // namespace dtrain::models::fused
