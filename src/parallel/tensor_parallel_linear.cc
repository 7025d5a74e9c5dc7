// The products at the edges of a sequence-parallel region with their
// communication overlapped (parallel/tensor_parallel.h: the contract).
//
// Layout of the pieces: each rank's part of the sequence (T / tp
// positions) splits into `chunks` pieces of `piece` positions, so that the
// whole sequence is [B, tp, chunks, piece] and piece j of every part is
// one collective's worth: the all-gather of rank r's piece j gives rows
// (p, j, ·) of the whole sequence for every p, the reduce-scatter of rows
// (p, j, ·) leaves rank p its piece j.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/impl/LocalDispatchKeySet.h>

#include "common/error.h"
#include "parallel/tensor_buffer.h"
#include "parallel/tensor_parallel.h"

namespace dtrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The column-split products one call takes at most (llama's q, k and v).
constexpr size_t kMaxColumnProducts = 3;

// The largest piece count up to `wanted` that divides `part`.
int64_t pieceCount(int64_t part, int64_t wanted) {
  int64_t count = std::clamp<int64_t>(wanted, 1, std::max<int64_t>(part, 1));
  while (part % count != 0) --count;
  return count;
}

// x [..., in] times weight [out, in]ᵀ plus bias: one matrix product over
// the flattened rows, the bias in its epilogue.
torch::Tensor product(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const torch::Tensor rows = x.reshape({-1, x.size(-1)});
  const torch::Tensor out = bias.defined() ? at::addmm(bias, rows, weight.t()) : rows.mm(weight.t());
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  return out.view(sizes);
}

torch::Tensor rowsOf(const torch::Tensor& x) { return x.reshape({-1, x.size(-1)}); }

// libtorch 1.13's autograd functions take no undefined inputs: an absent
// weight or bias is passed as an empty tensor.
bool present(const torch::Tensor& t) { return t.defined() && t.numel() > 0; }
torch::Tensor orAbsent(const torch::Tensor& t, const torch::Tensor& like) {
  return present(t) ? t : torch::empty({0}, like.options());
}

// The column-split products of a sequence shard. Forward takes up to three
// weights (and their biases; undefined where there are fewer).
class SequenceParallelColumn : public torch::autograd::Function<SequenceParallelColumn> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w0,
                               const torch::Tensor& w1, const torch::Tensor& w2, const torch::Tensor& b0,
                               const torch::Tensor& b1, const torch::Tensor& b2, int64_t group, int64_t chunks) {
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const TensorParallelGroup& g = TensorParallelGroup::byId(group);
    const std::vector<torch::Tensor> weights = presentOf({w0, w1, w2});
    const std::vector<torch::Tensor> biases{present(b0) ? b0 : torch::Tensor(), present(b1) ? b1 : torch::Tensor(),
                                            present(b2) ? b2 : torch::Tensor()};
    const int64_t batch = x.size(0), part = x.size(1), tp = g.size(), piece = part / chunks;
    variable_list outputs;
    if (chunks == 1) {
      const torch::Tensor whole = g.startAllGather(x.contiguous()).finish();  // [tp, B, part, d]
      for (size_t i = 0; i < weights.size(); ++i) {
        outputs.push_back(product(whole, weights[i], biases[i]).transpose(0, 1).reshape({batch, tp * part, -1}));
      }
    } else {
      for (const torch::Tensor& w : weights) outputs.push_back(torch::empty({batch, tp, chunks, piece, w.size(0)}, x.options()));
      PendingCollective next = g.startAllGather(x.narrow(1, 0, piece).contiguous());
      for (int64_t j = 0; j < chunks; ++j) {
        const torch::Tensor gathered = next.finish();  // [tp, B, piece, d]: piece j of every part
        if (j + 1 < chunks) next = g.startAllGather(x.narrow(1, (j + 1) * piece, piece).contiguous());
        for (size_t i = 0; i < weights.size(); ++i) {
          outputs[i].select(2, j).copy_(product(gathered, weights[i], biases[i]).transpose(0, 1));
        }
      }
      for (torch::Tensor& out : outputs) out = out.view({batch, tp * part, out.size(-1)});
    }
    ctx->save_for_backward({x, w0, w1, w2, b0, b1, b2});
    ctx->saved_data["group"] = group;
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const TensorParallelGroup& g = TensorParallelGroup::byId(ctx->saved_data["group"].toInt());
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const int64_t batch = x.size(0), part = x.size(1), dim = x.size(2), tp = g.size();
    // The shard's sequence again, while the input gradient's products run.
    PendingCollective gather = g.startAllGather(x.contiguous());
    torch::Tensor grad_whole;  // [B x T, d]: this rank's heads' share of the input gradient
    for (size_t i = 0; i < grads.size() && i < kMaxColumnProducts; ++i) {
      if (!grads[i].defined()) continue;
      const torch::Tensor g_rows = rowsOf(grads[i]);
      grad_whole = grad_whole.defined() ? grad_whole.addmm_(g_rows, saved[1 + i]) : g_rows.mm(saved[1 + i]);
    }
    if (!grad_whole.defined()) grad_whole = torch::zeros({batch * tp * part, dim}, x.options());
    PendingCollective scatter =
        g.startReduceScatter(grad_whole.view({batch, tp, part, dim}).transpose(0, 1).contiguous());
    // The weights' gradients while the input gradient is reduce-scattered.
    const torch::Tensor x_rows = gather.finish().transpose(0, 1).reshape({batch * tp * part, dim});
    variable_list out(1 + 2 * kMaxColumnProducts + 2);
    for (size_t i = 0; i < grads.size() && i < kMaxColumnProducts; ++i) {
      if (!grads[i].defined()) continue;
      const torch::Tensor g_rows = rowsOf(grads[i]);
      out[1 + i] = g_rows.t().mm(x_rows);
      if (present(saved[1 + kMaxColumnProducts + i])) out[1 + kMaxColumnProducts + i] = g_rows.sum(0);
    }
    out[0] = scatter.finish();
    return out;
  }

 private:
  static std::vector<torch::Tensor> presentOf(std::vector<torch::Tensor> tensors) {
    tensors.erase(std::remove_if(tensors.begin(), tensors.end(), [](const torch::Tensor& t) { return !present(t); }),
                  tensors.end());
    return tensors;
  }
};

// A row-split product reduce-scattered along the sequence.
class SequenceParallelRow : public torch::autograd::Function<SequenceParallelRow> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               int64_t group, int64_t chunks) {
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const TensorParallelGroup& g = TensorParallelGroup::byId(group);
    const int64_t batch = x.size(0), tp = g.size(), part = x.size(1) / tp, piece = part / chunks;
    const int64_t width = x.size(2), dim = weight.size(0);
    torch::Tensor out;
    if (chunks == 1) {
      const torch::Tensor y = product(x, weight, {});
      out = g.startReduceScatter(y.view({batch, tp, part, dim}).transpose(0, 1).contiguous()).finish();
    } else {
      const torch::Tensor pieces = x.view({batch, tp, chunks, piece, width});
      std::vector<PendingCollective> scattered;
      for (int64_t j = 0; j < chunks; ++j) {
        const torch::Tensor y = product(pieces.select(2, j), weight, {});  // [B, tp, piece, d]
        scattered.push_back(g.startReduceScatter(y.transpose(0, 1).contiguous()));
      }
      std::vector<torch::Tensor> parts;
      for (PendingCollective& p : scattered) parts.push_back(p.finish());  // [B, piece, d] each
      out = torch::cat(parts, 1);
    }
    ctx->save_for_backward({x, weight});
    ctx->saved_data["group"] = group;
    ctx->saved_data["chunks"] = chunks;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const TensorParallelGroup& g = TensorParallelGroup::byId(ctx->saved_data["group"].toInt());
    const int64_t chunks = ctx->saved_data["chunks"].toInt();
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& grad = grads[0];  // [B, part, d]
    const int64_t batch = x.size(0), whole = x.size(1), width = x.size(2), tp = g.size();
    const int64_t part = whole / tp, piece = part / chunks, dim = weight.size(0);
    torch::Tensor grad_rows;  // [B x T, d], the whole sequence's output gradient
    torch::Tensor grad_x;
    if (chunks == 1) {
      grad_rows = g.startAllGather(grad.contiguous()).finish().transpose(0, 1).reshape({batch * whole, dim});
      grad_x = grad_rows.mm(weight).view({batch, whole, width});
    } else {
      grad_x = torch::empty({batch, tp, chunks, piece, width}, x.options());
      std::vector<torch::Tensor> gathered;
      PendingCollective next = g.startAllGather(grad.narrow(1, 0, piece).contiguous());
      for (int64_t j = 0; j < chunks; ++j) {
        gathered.push_back(next.finish());  // [tp, B, piece, d]
        if (j + 1 < chunks) next = g.startAllGather(grad.narrow(1, (j + 1) * piece, piece).contiguous());
        grad_x.select(2, j).copy_(gathered.back().matmul(weight).transpose(0, 1));
      }
      grad_rows = torch::stack(gathered, 2).permute({1, 0, 2, 3, 4}).reshape({batch * whole, dim});
      grad_x = grad_x.view({batch, whole, width});
    }
    return {grad_x, grad_rows.t().mm(rowsOf(x)), torch::Tensor(), torch::Tensor()};
  }
};

void checkColumnShapes(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                       const std::vector<torch::Tensor>& biases) {
  bool ok = x.dim() == 3 && !weights.empty() && weights.size() <= kMaxColumnProducts &&
            (biases.empty() || biases.size() == weights.size());
  for (size_t i = 0; ok && i < weights.size(); ++i) {
    ok = weights[i].dim() == 2 && weights[i].size(1) == x.size(2) && weights[i].scalar_type() == x.scalar_type();
    if (ok && !biases.empty() && biases[i].defined()) {
      ok = biases[i].dim() == 1 && biases[i].size(0) == weights[i].size(0) &&
           biases[i].scalar_type() == x.scalar_type();
    }
  }
  if (ok) return;
  std::string shapes;
  for (const torch::Tensor& w : weights) shapes += " " + toString(w.sizes());
  throw ConfigError("tensor parallelism: the sequence-parallel column products take x [B, T/tp, d] and 1 to 3 "
                    "weights [n, d] (biases [n]) of x's dtype, got x " + toString(x.sizes()) + " and weights" +
                    shapes);
}

}  // namespace

namespace tp {

std::vector<torch::Tensor> sequenceParallelColumnLinears(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                                         const std::vector<torch::Tensor>& biases,
                                                         const TensorParallelGroup& group, int64_t chunks) {
  checkColumnShapes(x, weights, biases);
  const auto bias = [&](size_t i) { return orAbsent(i < biases.size() ? biases[i] : torch::Tensor(), x); };
  if (group.size() == 1) {
    std::vector<torch::Tensor> outputs;
    for (size_t i = 0; i < weights.size(); ++i) {
      outputs.push_back(product(x, weights[i], i < biases.size() ? biases[i] : torch::Tensor()));
    }
    return outputs;
  }
  const auto weight = [&](size_t i) { return orAbsent(i < weights.size() ? weights[i] : torch::Tensor(), x); };
  return SequenceParallelColumn::apply(x, weight(0), weight(1), weight(2), bias(0), bias(1), bias(2), group.id(),
                                       pieceCount(x.size(1), chunks));
}

torch::Tensor sequenceParallelRowLinear(const torch::Tensor& x, const torch::Tensor& weight,
                                        const TensorParallelGroup& group, int64_t chunks) {
  if (x.dim() != 3 || weight.dim() != 2 || weight.size(1) != x.size(2) || x.size(1) % group.size() != 0 ||
      weight.scalar_type() != x.scalar_type()) {
    throw ConfigError("tensor parallelism: the sequence-parallel row product takes x [B, T, f] (T a multiple of tp " +
                      std::to_string(group.size()) + ") and a weight [d, f] of x's dtype, got x " +
                      toString(x.sizes()) + " and weight " + toString(weight.sizes()));
  }
  if (group.size() == 1) return product(x, weight, {});
  return SequenceParallelRow::apply(x, weight, group.id(), pieceCount(x.size(1) / group.size(), chunks));
}

}  // namespace tp
}  // namespace dtrain
