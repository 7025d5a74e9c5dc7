// Tensor parallelism's communication, as autograd functions over the tp
// group of a device mesh: the conjugate operators of Megatron-LM (Shoeybi
// et al. 2019, "f" and "g") and of its sequence parallelism (Korthikanti et
// al. 2022), and the vocab-parallel cross-entropy that never gathers the
// logits. What a tensor-parallel plan puts at the edges of its column- and
// row-parallel products:
//
//   x [B, T, dim] replicated            x [B, T/tp, dim] sequence shard (SP)
//   h = copyToRegion(x, g)              h = gatherSequence(x, g, 1)
//   a = linear(h, W_col_shard)          a = linear(h, W_col_shard)
//   y = linear(a, W_row_shard)          y = linear(a, W_row_shard)
//   out = reduceFromRegion(y, g)        out = reduceScatterSequence(y, g, 1)
//
//   forward / backward:
//   copyToRegion            identity         / all-reduce (sum)
//   reduceFromRegion        all-reduce (sum) / identity
//   gatherSequence          all-gather       / reduce-scatter (sum)
//   reduceScatterSequence   reduce-scatter   / all-gather
//   splitSequence           this rank's part / all-gather
//   gatherParts             all-gather       / this rank's part
//
// Contract:
// - Collective: every rank of the group calls the same functions in the
//   same order with tensors of the same shape and dtype (their backward
//   runs in the reverse order on every rank, as autograd runs it); a
//   dimension that is gathered or scattered splits into size() equal
//   parts along it (ConfigError naming the shape otherwise).
// - The group must outlive every autograd graph built through it: a
//   backward whose group is gone throws ConfigError.
// - Results are ready on the tensors' current CUDA stream (CPU: in place
//   when the function returns); a collective that does not finish within
//   the group's timeout throws CommError naming the missing ranks.
// - A group of size 1 makes every function the identity (splitSequence
//   returns its input), with no collective.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include <torch/torch.h>

#include "comm/types.h"

namespace dtrain {

class Communicator;

// One rank's view of its tensor-parallel group: the communicator and the
// timeout of its collectives.
class TensorParallelGroup {
 public:
  static std::shared_ptr<TensorParallelGroup> create(std::shared_ptr<Communicator> comm,
                                                     std::chrono::milliseconds timeout);
  ~TensorParallelGroup();
  TensorParallelGroup(const TensorParallelGroup&) = delete;
  TensorParallelGroup& operator=(const TensorParallelGroup&) = delete;

  int rank() const;
  int size() const;
  std::chrono::milliseconds timeout() const { return timeout_; }
  // What the autograd functions keep to find the group in backward.
  int64_t id() const { return id_; }

  // Plain collectives (no autograd), waited for.
  // `tensor` (contiguous) reduced over the group in place.
  void allReduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::kSum) const;
  // The ranks' tensors concatenated along `dim` in rank order.
  torch::Tensor allGather(const torch::Tensor& tensor, int64_t dim) const;
  // `tensor` summed over the group; this rank's of size() equal parts along `dim`.
  torch::Tensor reduceScatter(const torch::Tensor& tensor, int64_t dim) const;

 private:
  TensorParallelGroup(std::shared_ptr<Communicator> comm, std::chrono::milliseconds timeout);

  std::shared_ptr<Communicator> comm_;
  std::chrono::milliseconds timeout_;
  int64_t id_ = 0;
};

namespace tp {

torch::Tensor copyToRegion(const torch::Tensor& x, const TensorParallelGroup& group);
torch::Tensor reduceFromRegion(const torch::Tensor& x, const TensorParallelGroup& group);
torch::Tensor gatherSequence(const torch::Tensor& x, const TensorParallelGroup& group, int64_t dim);
torch::Tensor reduceScatterSequence(const torch::Tensor& x, const TensorParallelGroup& group, int64_t dim);
torch::Tensor splitSequence(const torch::Tensor& x, const TensorParallelGroup& group, int64_t dim);
// Every rank's part concatenated along `dim` (whole logits from vocab shards).
torch::Tensor gatherParts(const torch::Tensor& x, const TensorParallelGroup& group, int64_t dim);

// The embedding rows of this rank's vocab shard (rows vocab_start ..
// vocab_start + weight_shard.size(0) - 1 of the whole table) looked up for
// `tokens`, zeros where a token lies outside the shard: a partial sum that
// reduceFromRegion (or reduceScatterSequence) completes.
torch::Tensor vocabShardEmbedding(const torch::Tensor& tokens, const torch::Tensor& weight_shard, int64_t vocab_start);

// Cross-entropy per position of logits split along the vocabulary:
// logits_shard [N, V/tp] holds this rank's columns vocab_start .. of the
// [N, V] logits, targets [N] int64 global ids in [0, V). Returns [N]
// float32, the same on every rank, computed in float32 whatever the logits'
// dtype: the row maxima and the sums of exponentials and the targets'
// logits are all-reduced (two collectives of N floats), never the logits.
// Backward is local: (softmax - one_hot(target)) on this rank's columns.
// Targets must lie in [0, V) (V: the shards together); the data loader's
// token ids do. ConfigError for shapes other than these.
// The classifier and vocabParallelCrossEntropy in one: hidden [N, d] times
// this rank's weight rows [V/tp, d] (under autocast, in its dtype), the
// loss per row [N] float32, chunk_rows rows at a time (0: as many as make
// 2^28 logits) so that no more than one chunk's logits ever exist: forward
// keeps each row's log-sum-exp, backward recomputes each chunk's logits.
// Two collectives per chunk in forward, none in backward. With one chunk it
// is the classifier followed by vocabParallelCrossEntropy (no recompute).
torch::Tensor vocabParallelClassifierCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight_shard,
                                                  const torch::Tensor& targets, int64_t vocab_start,
                                                  const TensorParallelGroup& group, int64_t chunk_rows = 0);

torch::Tensor vocabParallelCrossEntropy(const torch::Tensor& logits_shard, const torch::Tensor& targets,
                                        int64_t vocab_start, const TensorParallelGroup& group);

}  // namespace tp
}  // namespace dtrain
