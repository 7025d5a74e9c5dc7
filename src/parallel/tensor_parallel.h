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
#include <vector>

#include <torch/torch.h>

#include "comm/types.h"

namespace dtrain {

class Communicator;
class TensorParallelGroup;
class Work;

// A collective started beside the products (TensorParallelGroup::start*):
// on CUDA it runs from a side stream ordered after the caller's current
// stream, which goes on with the next product; on CPU in the
// communicator's background. Its tensors live until it is finished.
class PendingCollective {
 public:
  PendingCollective();
  PendingCollective(PendingCollective&&) noexcept;
  PendingCollective& operator=(PendingCollective&&) noexcept;
  // One never finished is finished here (its failure then goes unreported:
  // the caller is already unwinding from another).
  ~PendingCollective();

  // The collective's output, usable on the caller's current stream: CUDA
  // orders that stream after the collective (the host does not wait); CPU
  // waits for it within the group's timeout. Rethrows the collective's
  // failure (CommError, TimeoutError). Once only.
  torch::Tensor finish();

 private:
  friend class TensorParallelGroup;
  struct State;
  std::unique_ptr<State> state_;
};

// What the group's collectives cost while it timed them (CUDA only; the
// CPU collectives are not timed): their time on the GPU, and of it the time
// the caller's stream stood waiting for them (all of a collective's time
// when nothing ran beside it), in ms.
struct TensorParallelCommTime {
  double total_ms = 0;
  double exposed_ms = 0;
  int64_t collectives = 0;
};

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

  // The live group of that id (what an autograd function's backward
  // finds it by); ConfigError once it is destroyed.
  static const TensorParallelGroup& byId(int64_t id);

  // Plain collectives (no autograd), their results ready when they return
  // (CUDA: on the caller's current stream, which is ordered after them;
  // the host does not wait).
  // `tensor` (contiguous) reduced over the group in place.
  void allReduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::kSum) const;
  // The ranks' tensors concatenated along `dim` in rank order.
  torch::Tensor allGather(const torch::Tensor& tensor, int64_t dim) const;
  // `tensor` summed over the group; this rank's of size() equal parts along `dim`.
  torch::Tensor reduceScatter(const torch::Tensor& tensor, int64_t dim) const;

  // The same collectives started beside the products (size() > 1).
  // The ranks' `tensor`s (contiguous) stacked in rank order: [size(), ...].
  PendingCollective startAllGather(const torch::Tensor& tensor) const;
  // `tensor` [size(), ...] (contiguous) summed over the group, this rank's
  // index of dimension 0: [...].
  PendingCollective startReduceScatter(const torch::Tensor& tensor) const;

  // Times the collectives from now on (dtrain bench train --breakdown);
  // takeTiming() synchronizes the device, returns the time since and stops.
  void startTiming();
  TensorParallelCommTime takeTiming();

  // The side stream and the timing's events (CUDA; tensor_parallel.cc).
  struct Async;

 private:
  friend class PendingCollective;
  TensorParallelGroup(std::shared_ptr<Communicator> comm, std::chrono::milliseconds timeout);
  enum class Op { kAllReduce, kAllGather, kReduceScatter };
  // Launches `op` from `input` into `output` on the stream `stream` (CUDA;
  // nullptr for CPU), the timing's events around it.
  std::shared_ptr<Work> launch(Op op, const torch::Tensor& input, const torch::Tensor& output, void* stream,
                               ReduceOp reduce = ReduceOp::kSum) const;
  // A collective launched on the caller's current stream, finished as the
  // plain collectives' contract says.
  void runNow(Op op, const torch::Tensor& input, const torch::Tensor& output, ReduceOp reduce = ReduceOp::kSum) const;
  PendingCollective start(Op op, const torch::Tensor& input, torch::Tensor output) const;

  std::shared_ptr<Communicator> comm_;
  std::chrono::milliseconds timeout_;
  int64_t id_ = 0;
  std::unique_ptr<Async> async_;
};

namespace tp {

namespace detail {
// `dim` of x, negative counting from the end (ConfigError naming `what`
// and the shape when x has no such dimension), and that x splits into
// `parts` equal parts along it (ConfigError otherwise): what the group's
// collectives and the functions below check (tensor_parallel_group.cc).
int64_t checkedDim(const torch::Tensor& x, int64_t dim, const char* what);
void checkEqualParts(const torch::Tensor& x, int64_t dim, int parts, const char* what);
}  // namespace detail

torch::Tensor copyToRegion(const torch::Tensor& x, const TensorParallelGroup& group);
torch::Tensor reduceFromRegion(const torch::Tensor& x, const TensorParallelGroup& group);
torch::Tensor gatherSequence(const torch::Tensor& x, const TensorParallelGroup& group, int64_t dim);
torch::Tensor reduceScatterSequence(const torch::Tensor& x, const TensorParallelGroup& group, int64_t dim);
torch::Tensor splitSequence(const torch::Tensor& x, const TensorParallelGroup& group, int64_t dim);
// Every rank's part concatenated along `dim` (whole logits from vocab shards).
torch::Tensor gatherParts(const torch::Tensor& x, const TensorParallelGroup& group, int64_t dim);

// The products at the edges of a sequence-parallel region with their
// communication overlapped (tensor_parallel_linear.cc), as Megatron-LM's
// tp-comm-overlap and PyTorch's async TP do. `chunks` splits each rank's
// part of the sequence (T / tp positions) into that many pieces (the
// largest count up to it that divides the part; 1: no pieces).
// x, weights and biases come in one floating dtype, the one the products
// run in (models::ops::matmulType: autocast's under autocast).
//
// The column-split products linear(gatherSequence(x, group, 1), weights[i],
// biases[i]) of this rank's stream x [B, T/tp, d] (a bias may be
// undefined), each [B, T, n_i]. Forward gathers the pieces one after
// another, each piece's products running while the next piece is
// gathered. Backward keeps only x (this rank's part, not the gathered
// sequence) and gathers it again while the input gradient's products run,
// then reduce-scatters that gradient while the weights' gradients' run.
std::vector<torch::Tensor> sequenceParallelColumnLinears(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                                         const std::vector<torch::Tensor>& biases,
                                                         const TensorParallelGroup& group, int64_t chunks);
// reduceScatterSequence(linear(x, weight), group, 1) for x [B, T, f] and a
// row-split weight [d, f]: [B, T/tp, d]. Forward computes the product piece
// by piece (the piece of every rank's part), each piece's reduce-scatter
// running while the next piece's product does; backward all-gathers the
// output's gradient piece by piece the same way, each piece's input
// gradient computed while the next one is gathered.
torch::Tensor sequenceParallelRowLinear(const torch::Tensor& x, const torch::Tensor& weight,
                                        const TensorParallelGroup& group, int64_t chunks);

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
