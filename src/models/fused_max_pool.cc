// 2-D max pooling over channels-last activations as an autograd function
// over the fused kernels (max_pool.h).
#include <cstdint>
#include <vector>

#include "models/fused_ops_cuda.h"
#include "models/fused_ops_support.h"

namespace dtrain::models::fused {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using namespace detail;

// The kernels' arguments for x of [N, C, H, W] (sizes only).
template <typename Args>
void fillShape(Args& a, torch::IntArrayRef sizes, int64_t kernel, int64_t stride, int64_t padding,
               torch::ScalarType dtype) {
  a.batch = sizes[0];
  a.channels = static_cast<int>(sizes[1]);
  a.height = static_cast<int>(sizes[2]);
  a.width = static_cast<int>(sizes[3]);
  a.kernel = static_cast<int>(kernel);
  a.stride = static_cast<int>(stride);
  a.padding = static_cast<int>(padding);
  a.act_dtype = kernelType(dtype);
}

// Input x (channels-last, fp32 or bf16); output y of [N, C, OH, OW] in x's
// dtype, channels-last. Saved: the one-byte argmax (channels-last, as y)
// and x's sizes and dtype, not x.
class FusedMaxPoolFunction : public torch::autograd::Function<FusedMaxPoolFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t kernel, int64_t stride,
                               int64_t padding) {
    KernelScope scope(x);
    kernels::MaxPool2dForwardArgs a;
    fillShape(a, x.sizes(), kernel, stride, padding, x.scalar_type());
    const int64_t out_h = kernels::max_pool2d_output_size(a.height, a.kernel, a.stride, a.padding);
    const int64_t out_w = kernels::max_pool2d_output_size(a.width, a.kernel, a.stride, a.padding);
    const auto channels_last = at::MemoryFormat::ChannelsLast;
    const std::vector<int64_t> out_sizes = {a.batch, a.channels, out_h, out_w};
    const torch::Tensor y = at::empty(out_sizes, x.options().memory_format(channels_last));
    const torch::Tensor argmax = at::empty(out_sizes, x.options().dtype(torch::kByte).memory_format(channels_last));
    a.x = x.data_ptr();
    a.y = y.data_ptr();
    a.argmax = argmax.data_ptr<uint8_t>();
    DTRAIN_CUDA_CHECK(kernels::max_pool2d_forward(a, streamOf(x)));
    ctx->save_for_backward({argmax});
    ctx->saved_data["sizes"] = x.sizes().vec();
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["kernel"] = kernel;
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["padding"] = padding;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const torch::Tensor argmax = ctx->get_saved_variables()[0];
    const std::vector<int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto channels_last = at::MemoryFormat::ChannelsLast;
    const auto options = argmax.options().dtype(dtype).memory_format(channels_last);
    if (!grads[0].defined()) {
      return {at::empty(sizes, options).zero_(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    KernelScope scope(argmax);
    const torch::Tensor dy = grads[0].to(dtype).contiguous(channels_last);
    const torch::Tensor dx = at::empty(sizes, options);
    kernels::MaxPool2dBackwardArgs a;
    fillShape(a, sizes, ctx->saved_data["kernel"].toInt(), ctx->saved_data["stride"].toInt(),
              ctx->saved_data["padding"].toInt(), dtype);
    a.dy = dy.data_ptr();
    a.argmax = argmax.data_ptr<uint8_t>();
    a.dx = dx.data_ptr();
    DTRAIN_CUDA_CHECK(kernels::max_pool2d_backward(a, streamOf(argmax)));
    return {dx, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// What the kernel takes: square windows of 1..8, torch's padding bound, a
// non-empty output, one image's elements below 2^31.
bool poolTakes(const torch::Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  if (kernel < 1 || kernel > kernels::kMaxPoolMaxKernel || stride < 1 || stride > INT32_MAX || padding < 0 ||
      padding > kernel / 2) {
    return false;
  }
  for (int d = 1; d < 4; ++d) {
    if (x.size(d) > INT32_MAX) return false;
  }
  const auto k = static_cast<int>(kernel), s = static_cast<int>(stride), p = static_cast<int>(padding);
  const int64_t out_h = kernels::max_pool2d_output_size(static_cast<int>(x.size(2)), k, s, p);
  const int64_t out_w = kernels::max_pool2d_output_size(static_cast<int>(x.size(3)), k, s, p);
  const int64_t image = x.size(1) * x.size(2) * x.size(3);
  return out_h >= 1 && out_w >= 1 && image <= INT32_MAX && out_h * out_w * x.size(1) <= INT32_MAX;
}

}  // namespace

std::optional<torch::Tensor> maxPool2d(const torch::Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  if (!activeFor(x) || x.dim() != 4 || x.numel() == 0 || !isKernelType(x.scalar_type()) ||
      !x.is_contiguous(at::MemoryFormat::ChannelsLast) || !poolTakes(x, kernel, stride, padding)) {
    return std::nullopt;
  }
  return FusedMaxPoolFunction::apply(x, kernel, stride, padding);
}

}  // namespace dtrain::models::fused
