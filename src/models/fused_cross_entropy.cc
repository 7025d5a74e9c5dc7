// The LM head and its loss in chunks of rows, as llm.c does: the gradients
// of hidden and of the output weight are computed during forward, so the
// [tokens, vocab] logits never exist in full (cross_entropy.h).
#include "models/fused_ops_cuda.h"
#include "models/fused_ops_support.h"
#include "models/lm_counts.h"
#include "libtorch/compat.h"

#include <algorithm>

namespace dtrain::models::fused {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using namespace detail;

constexpr int64_t kIgnoreIndex = -100;  // torch's default: rows with this target do not count
// The logits of one chunk take about 512 MiB; rows of the chunk buffer are
// padded so the kernel and cuBLAS see 16-byte aligned rows whatever the
// vocabulary (models/lm_counts.h, which the memory estimate sizes them by).

// The rows' gradients and the weight's, filled chunk by chunk.
struct HeadGradients {
  torch::Tensor hidden;  // [rows, dim] in hidden's dtype, or undefined
  torch::Tensor weight;  // [padded vocab, dim] in weight's dtype, or undefined
};

// One chunk of rows [r0, r0 + n): logits, loss and dlogits, gradient products.
// w holds the weight's `vocab` rows and, when the vocabulary is not a
// multiple of the row padding, zero rows up to the buffer's padded width: every
// product then runs at an aligned size (GPT-2's 50257 is ~25% slower in
// cuBLAS than 50304, and torch.compile pads the same way), the padding
// logits are exactly 0 and the kernel writes 0 as their gradient, so the
// extra rows add nothing to d(hidden) and their d(weight) rows are dropped.
void runChunk(const torch::Tensor& h, const torch::Tensor& w, int64_t vocab, const torch::Tensor& targets,
              const torch::Tensor& losses, const torch::Tensor& inverse_count, const torch::Tensor& buffer,
              int64_t r0, int64_t n, HeadGradients& grads) {
  const int64_t width = w.size(0);  // vocab, or the padded vocabulary
  const torch::Tensor hc = h.narrow(0, r0, n);
  torch::Tensor logits = buffer.narrow(0, 0, n).narrow(1, 0, width);
  torch::mm_out(logits, hc, w.t());
  kernels::CrossEntropyArgs a;
  a.logits = logits.data_ptr();
  a.targets = targets.data_ptr<int64_t>() + r0;
  a.target_type = kernels::IndexType::kInt64;
  a.losses = losses.data_ptr<float>() + r0;
  a.rows = n;
  a.vocab = static_cast<int>(vocab);
  a.row_stride = buffer.size(1);
  a.ignore_index = kIgnoreIndex;
  a.grad_scale_device = inverse_count.data_ptr<float>();
  a.write_dlogits = grads.hidden.defined() || grads.weight.defined();
  a.dtype = kernelType(h);
  DTRAIN_CUDA_CHECK(kernels::cross_entropy_forward_backward(a, streamOf(h)));
  if (grads.hidden.defined()) {
    torch::Tensor dh = grads.hidden.narrow(0, r0, n);
    if (dh.scalar_type() == logits.scalar_type()) {
      torch::mm_out(dh, logits, w);
    } else {
      dh.copy_(torch::mm(logits, w));
    }
  }
  if (!grads.weight.defined()) return;
  // dW += dlogitsᵀ h: the products add up the chunks themselves (beta 1),
  // in fp32 for an fp32 master weight where libtorch can
  // (compat::productInto), into all `width` rows; the padding rows are
  // dropped at the end.
  compat::productInto(grads.weight, logits.t(), hc, /*accumulate=*/r0 > 0);
}

// Inputs hidden [rows, dim], weight [vocab, dim] (their own dtypes, cast to
// `compute` inside), targets [rows] int64. Output: the mean loss, fp32.
class FusedClassifierCrossEntropyFunction
    : public torch::autograd::Function<FusedClassifierCrossEntropyFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, int64_t compute, bool hidden_grad, bool weight_grad) {
    KernelScope scope(hidden);
    const auto type = static_cast<torch::ScalarType>(compute);
    const torch::Tensor h = aligned(hidden.to(type));
    const int64_t rows = h.size(0), vocab = weight.size(0);
    const int64_t padded = models::fusedHeadPaddedVocab(vocab);
    // The weight in the compute dtype, with zero rows up to `padded`.
    torch::Tensor w = aligned(weight.to(type));
    if (padded != vocab) {
      torch::Tensor zero_padded = at::zeros({padded, w.size(1)}, w.options());
      zero_padded.narrow(0, 0, vocab).copy_(w);
      w = zero_padded;
    }
    const int64_t chunk = models::fusedHeadChunkRows(rows, vocab, h.element_size());
    const torch::Tensor losses = at::empty({rows}, h.options().dtype(torch::kFloat));
    // 1 / (rows that count), on the device: the mean's denominator without a sync.
    const torch::Tensor inverse_count = targets.ne(kIgnoreIndex).sum().to(torch::kFloat).reciprocal().reshape({1});
    const torch::Tensor buffer = at::empty({chunk, padded}, h.options());
    HeadGradients grads;
    if (hidden_grad) grads.hidden = at::empty(hidden.sizes(), hidden.options());
    if (weight_grad) grads.weight = at::empty({padded, weight.size(1)}, weight.options());
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      runChunk(h, w, vocab, targets, losses, inverse_count, buffer, r0, std::min(chunk, rows - r0), grads);
    }
    if (grads.hidden.defined()) ctx->saved_data["dhidden"] = grads.hidden;
    // The vocabulary's rows of the padded gradient: a contiguous view.
    if (grads.weight.defined()) ctx->saved_data["dweight"] = grads.weight.narrow(0, 0, vocab);
    return (losses.sum() * inverse_count).reshape({});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    TORCH_CHECK(!ctx->saved_data.count("consumed"),
                "dtrain fused classifier + cross-entropy: a second backward through one forward (its gradients "
                "are scaled in place; retain_graph is not supported)");
    ctx->saved_data["consumed"] = true;
    auto take = [&](const char* key) {
      auto it = ctx->saved_data.find(key);
      if (it == ctx->saved_data.end()) return torch::Tensor();
      torch::Tensor t = it->second.toTensor();
      ctx->saved_data.erase(it);  // the graph no longer holds them once backward has
      return t;
    };
    torch::Tensor dhidden = take("dhidden"), dweight = take("dweight");
    // The gradients were computed for a loss gradient of 1.
    if (grads[0].defined()) {
      if (dhidden.defined()) dhidden.mul_(grads[0]);
      if (dweight.defined()) dweight.mul_(grads[0]);
    }
    return {dhidden, dweight, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::optional<torch::Tensor> classifierCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                                    const torch::Tensor& targets) {
  if (!activeFor(hidden) || hidden.dim() == 0 || weight.dim() != 2 || weight.size(1) != hidden.size(-1) ||
      targets.scalar_type() != torch::kLong || targets.device() != hidden.device() || targets.numel() == 0 ||
      targets.numel() * hidden.size(-1) != hidden.numel() || targets.numel() >= (int64_t{1} << 31) ||
      weight.size(0) >= (int64_t{1} << 31)) {
    return std::nullopt;
  }
  // The logits' dtype: autocast's (bf16 only), else the inputs' own.
  const std::optional<torch::ScalarType> autocast = autocastType();
  const torch::ScalarType compute = autocast ? *autocast : hidden.scalar_type();
  if (compute != torch::kBFloat16 && (autocast || compute != torch::kFloat)) return std::nullopt;
  if (!isKernelType(hidden.scalar_type()) || !isKernelType(weight.scalar_type()) ||
      (!autocast && weight.scalar_type() != compute)) {
    return std::nullopt;
  }
  const bool grad = torch::GradMode::is_enabled();
  const int64_t rows = targets.numel();
  return FusedClassifierCrossEntropyFunction::apply(hidden.reshape({rows, hidden.size(-1)}), weight,
                                                    targets.reshape({rows}).contiguous(),
                                                    static_cast<int64_t>(compute), grad && hidden.requires_grad(),
                                                    grad && weight.requires_grad());
}

}  // namespace dtrain::models::fused
