#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "parallel/tensor_buffer.h"

namespace dtrain {
namespace {

const TensorParallelGroup& groupOf(const torch::autograd::AutogradContext* ctx) {
  return TensorParallelGroup::byId(ctx->saved_data.at("group").toInt());
}

using tp::detail::checkedDim;
using tp::detail::checkEqualParts;

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Identity forward, all-reduce backward (Megatron's f).
class CopyToRegion : public torch::autograd::Function<CopyToRegion> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    torch::Tensor g = grads[0].contiguous();
    groupOf(ctx).allReduce(g);
    return {g, torch::Tensor()};
  }
};

// All-reduce forward, identity backward (Megatron's g).
class ReduceFromRegion : public torch::autograd::Function<ReduceFromRegion> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    torch::Tensor out = x.contiguous().clone();
    groupOf(ctx).allReduce(out);
    return out;
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], torch::Tensor()}; }
};

// What the sequence and parts functions do along a dimension, forward or backward.
enum class AlongDim { kAllGather, kReduceScatter, kThisRanksPart };

torch::Tensor along(AlongDim op, const TensorParallelGroup& g, const torch::Tensor& x, int64_t dim) {
  switch (op) {
    case AlongDim::kAllGather: return g.allGather(x, dim);
    case AlongDim::kReduceScatter: return g.reduceScatter(x, dim);
    case AlongDim::kThisRanksPart: break;
  }
  return x.chunk(g.size(), dim)[static_cast<size_t>(g.rank())].contiguous();
}

// `Forward` along `dim` in forward, `Backward` (its conjugate) in backward.
template <AlongDim Forward, AlongDim Backward>
class AlongDimFunction : public torch::autograd::Function<AlongDimFunction<Forward, Backward>> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group, int64_t dim) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["dim"] = dim;
    return along(Forward, groupOf(ctx), x, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {along(Backward, groupOf(ctx), grads[0], ctx->saved_data["dim"].toInt()), torch::Tensor(),
            torch::Tensor()};
  }
};

using GatherSequence = AlongDimFunction<AlongDim::kAllGather, AlongDim::kReduceScatter>;
using ReduceScatterSequence = AlongDimFunction<AlongDim::kReduceScatter, AlongDim::kAllGather>;
using SplitSequence = AlongDimFunction<AlongDim::kThisRanksPart, AlongDim::kAllGather>;
using GatherParts = AlongDimFunction<AlongDim::kAllGather, AlongDim::kThisRanksPart>;

// Cross-entropy over vocab shards; saves the local softmax for a local backward.
class VocabParallelCrossEntropy : public torch::autograd::Function<VocabParallelCrossEntropy> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets,
                               int64_t vocab_start, int64_t group) {
    ctx->saved_data["group"] = group;
    const TensorParallelGroup& g = groupOf(ctx);
    const int64_t width = logits.size(1);
    torch::Tensor x = logits.to(torch::kFloat);
    torch::Tensor row_max = std::get<0>(x.max(1)).contiguous();
    g.allReduce(row_max, ReduceOp::kMax);
    x = x - row_max.unsqueeze(1);
    const torch::Tensor local = targets - vocab_start;
    const torch::Tensor here = local.ge(0).logical_and(local.lt(width));
    const torch::Tensor index = local.clamp(0, width - 1);
    // Row 0: the targets' logits (on the rank that holds each); row 1: the sums of exponentials.
    torch::Tensor sums = torch::empty({2, x.size(0)}, x.options());
    sums[0].copy_(x.gather(1, index.unsqueeze(1)).squeeze(1).masked_fill(here.logical_not(), 0.0));
    torch::Tensor exp = x.exp_();
    sums[1].copy_(exp.sum(1));
    g.allReduce(sums);
    exp.div_(sums[1].unsqueeze(1));  // this rank's columns of the softmax
    ctx->save_for_backward({exp, index, here});
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return sums[1].log() - sums[0];
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    torch::Tensor grad = saved[0].clone();
    grad.scatter_add_(1, saved[1].unsqueeze(1), saved[2].to(grad.scalar_type()).neg().unsqueeze(1));
    grad.mul_(grads[0].unsqueeze(1));
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {grad.to(dtype), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// The classifier and the cross-entropy of rows [begin, begin + n): this
// rank's float32 logits, the row maxima and (all-reduced) the sums and the
// targets' logits; what the fused function's forward and backward share.
struct ClassifierChunk {
  torch::Tensor logits;  // [n, V/tp] float32
  torch::Tensor index;   // the targets' columns here (clamped)
  torch::Tensor here;    // whether the target's column is this rank's
  torch::ScalarType product = torch::kFloat;  // the dtype the product ran in (autocast's)
};

// Rows of the classifier's logits the fused function computes at a time
// (float32: 1 GiB a chunk; llama-8b's 4096 rows at tp 2 are one chunk, a
// batch of 64k rows 32).
constexpr int64_t kClassifierChunkElements = int64_t{1} << 28;

ClassifierChunk classifierChunk(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                                int64_t vocab_start) {
  ClassifierChunk c;
  const torch::Tensor product = at::matmul(hidden, weight.t());
  c.product = product.scalar_type();
  c.logits = product.to(torch::kFloat);
  const int64_t width = weight.size(0);
  const torch::Tensor local = targets - vocab_start;
  c.here = local.ge(0).logical_and(local.lt(width));
  c.index = local.clamp(0, width - 1);
  return c;
}

// vocabParallelCrossEntropy over the classifier's product, chunk by chunk:
// forward keeps only each row's log-sum-exp; backward recomputes each
// chunk's logits (in the dtype forward's product had) and their softmax.
class VocabParallelClassifierCrossEntropy
    : public torch::autograd::Function<VocabParallelClassifierCrossEntropy> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, int64_t vocab_start, int64_t group, int64_t chunk) {
    ctx->saved_data["group"] = group;
    const TensorParallelGroup& g = groupOf(ctx);
    const int64_t rows = hidden.size(0);
    torch::Tensor lse = torch::empty({rows}, hidden.options().dtype(torch::kFloat));
    torch::Tensor loss = torch::empty({rows}, hidden.options().dtype(torch::kFloat));
    torch::ScalarType product = weight.scalar_type();
    for (int64_t begin = 0; begin < rows; begin += chunk) {
      const int64_t n = std::min(chunk, rows - begin);
      ClassifierChunk c = classifierChunk(hidden.narrow(0, begin, n), weight, targets.narrow(0, begin, n), vocab_start);
      product = c.product;
      torch::Tensor row_max = std::get<0>(c.logits.max(1)).contiguous();
      g.allReduce(row_max, ReduceOp::kMax);
      c.logits.sub_(row_max.unsqueeze(1));
      torch::Tensor sums = torch::empty({2, n}, c.logits.options());
      sums[0].copy_(c.logits.gather(1, c.index.unsqueeze(1)).squeeze(1).masked_fill(c.here.logical_not(), 0.0));
      sums[1].copy_(c.logits.exp_().sum(1));
      g.allReduce(sums);
      const torch::Tensor log_sum = sums[1].log();
      lse.narrow(0, begin, n).copy_(log_sum + row_max);
      loss.narrow(0, begin, n).copy_(log_sum - sums[0]);
    }
    ctx->save_for_backward({hidden, weight, targets, lse});
    ctx->saved_data["vocab_start"] = vocab_start;
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["product"] = static_cast<int64_t>(product);
    return loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& hidden = saved[0];
    const torch::Tensor& weight = saved[1];
    const auto product = static_cast<torch::ScalarType>(ctx->saved_data["product"].toInt());
    const int64_t vocab_start = ctx->saved_data["vocab_start"].toInt();
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const torch::Tensor h = hidden.to(product), w = weight.to(product);
    torch::Tensor grad_hidden = torch::empty(hidden.sizes(), hidden.options().dtype(product));
    torch::Tensor grad_weight = torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat));
    for (int64_t begin = 0; begin < hidden.size(0); begin += chunk) {
      const int64_t n = std::min(chunk, hidden.size(0) - begin);
      const torch::Tensor h_chunk = h.narrow(0, begin, n);
      ClassifierChunk c = classifierChunk(h_chunk, w, saved[2].narrow(0, begin, n), vocab_start);
      torch::Tensor p = c.logits.sub_(saved[3].narrow(0, begin, n).unsqueeze(1)).exp_();
      p.scatter_add_(1, c.index.unsqueeze(1), c.here.to(p.scalar_type()).neg().unsqueeze(1));
      p.mul_(grads[0].narrow(0, begin, n).unsqueeze(1));
      const torch::Tensor g = p.to(product);
      grad_hidden.narrow(0, begin, n).copy_(at::matmul(g, w));
      grad_weight.add_(at::matmul(g.t(), h_chunk).to(torch::kFloat));
    }
    return {grad_hidden.to(hidden.scalar_type()), grad_weight.to(weight.scalar_type()), torch::Tensor(),
            torch::Tensor(),  torch::Tensor(),                          torch::Tensor()};
  }
};

}  // namespace

namespace tp {

torch::Tensor copyToRegion(const torch::Tensor& x, const TensorParallelGroup& group) {
  if (group.size() == 1) return x;
  return CopyToRegion::apply(x, group.id());
}

torch::Tensor reduceFromRegion(const torch::Tensor& x, const TensorParallelGroup& group) {
  if (group.size() == 1) return x;
  return ReduceFromRegion::apply(x, group.id());
}

torch::Tensor gatherSequence(const torch::Tensor& x, const TensorParallelGroup& group, int64_t dim) {
  const int64_t d = checkedDim(x, dim, "gatherSequence");
  if (group.size() == 1) return x;
  return GatherSequence::apply(x, group.id(), d);
}

torch::Tensor reduceScatterSequence(const torch::Tensor& x, const TensorParallelGroup& group, int64_t dim) {
  const int64_t d = checkedDim(x, dim, "reduceScatterSequence");
  checkEqualParts(x, d, group.size(), "reduceScatterSequence");
  if (group.size() == 1) return x;
  return ReduceScatterSequence::apply(x, group.id(), d);
}

torch::Tensor splitSequence(const torch::Tensor& x, const TensorParallelGroup& group, int64_t dim) {
  const int64_t d = checkedDim(x, dim, "splitSequence");
  checkEqualParts(x, d, group.size(), "splitSequence");
  if (group.size() == 1) return x;
  return SplitSequence::apply(x, group.id(), d);
}

torch::Tensor gatherParts(const torch::Tensor& x, const TensorParallelGroup& group, int64_t dim) {
  const int64_t d = checkedDim(x, dim, "gatherParts");
  if (group.size() == 1) return x;
  return GatherParts::apply(x, group.id(), d);
}

torch::Tensor vocabShardEmbedding(const torch::Tensor& tokens, const torch::Tensor& weight_shard, int64_t vocab_start) {
  const int64_t rows = weight_shard.size(0);
  const torch::Tensor local = tokens - vocab_start;
  const torch::Tensor outside = local.lt(0).logical_or(local.ge(rows));
  const torch::Tensor rows_used = local.masked_fill(outside, 0);
  return torch::embedding(weight_shard, rows_used).masked_fill(outside.unsqueeze(-1), 0.0);
}

torch::Tensor vocabParallelCrossEntropy(const torch::Tensor& logits_shard, const torch::Tensor& targets,
                                        int64_t vocab_start, const TensorParallelGroup& group) {
  if (logits_shard.dim() != 2 || targets.dim() != 1 || targets.size(0) != logits_shard.size(0) ||
      targets.scalar_type() != torch::kLong) {
    throw ConfigError("tensor parallelism: vocab-parallel cross-entropy takes logits [N, V/tp] and int64 targets "
                      "[N], got " + toString(logits_shard.sizes()) + " and " + toString(targets.sizes()) + " " +
                      std::string(c10::toString(targets.scalar_type())));
  }
  return VocabParallelCrossEntropy::apply(logits_shard, targets, vocab_start, group.id());
}

torch::Tensor vocabParallelClassifierCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight_shard,
                                                  const torch::Tensor& targets, int64_t vocab_start,
                                                  const TensorParallelGroup& group, int64_t chunk_rows) {
  if (hidden.dim() != 2 || weight_shard.dim() != 2 || hidden.size(1) != weight_shard.size(1) || targets.dim() != 1 ||
      targets.size(0) != hidden.size(0) || targets.scalar_type() != torch::kLong) {
    throw ConfigError("tensor parallelism: the vocab-parallel classifier takes hidden [N, d], a weight shard "
                      "[V/tp, d] and int64 targets [N], got " + toString(hidden.sizes()) + ", " +
                      toString(weight_shard.sizes()) + " and " + toString(targets.sizes()) + " " +
                      std::string(c10::toString(targets.scalar_type())));
  }
  if (chunk_rows <= 0) chunk_rows = std::max<int64_t>(1, kClassifierChunkElements / std::max<int64_t>(1, weight_shard.size(0)));
  if (hidden.size(0) <= chunk_rows) {
    // One chunk: keeping its softmax costs no more than the recomputation would.
    return VocabParallelCrossEntropy::apply(at::matmul(hidden, weight_shard.t()), targets, vocab_start, group.id());
  }
  return VocabParallelClassifierCrossEntropy::apply(hidden, weight_shard, targets, vocab_start, group.id(), chunk_rows);
}

}  // namespace tp
}  // namespace dtrain
