// Tensor collectives on the job's communicator, for a training loop of your
// own (torch.distributed's all_reduce, broadcast, all_gather_into_tensor,
// reduce_scatter_tensor and barrier):
//
//   auto ctx = dtrain::init();
//   torch::Tensor t = torch::ones({4}, ctx->device());
//   dtrain::dist::allReduce(*ctx, t);                  // t = sum over ranks, in place
//   dtrain::dist::allReduce(*ctx, t, {.op = dtrain::dist::ReduceOp::kAvg});
//
// Every rank calls the same collectives in the same order with tensors of the
// same shape and dtype (float32/64, float16, bfloat16, int32/64, uint8) on
// the context's device. Each call returns when the result is ready to use on
// the tensor's current CUDA stream (CPU: when it is in place). A collective
// that does not finish within its timeout (the context's collective timeout
// unless the options give one) throws, naming the operation and the ranks
// that did not arrive.
#pragma once

#include <chrono>

#include <torch/types.h>

#include "dtrain/init.h"

namespace dtrain::dist {

enum class ReduceOp { kSum, kAvg, kMin, kMax, kProduct };

struct Options {
  ReduceOp op = ReduceOp::kSum;           // allReduce, reduceScatter
  int root = 0;                           // broadcast
  std::chrono::milliseconds timeout{0};   // 0: the context's collective timeout
};

// `tensor` (contiguous) is reduced over all ranks in place.
void allReduce(Context& ctx, torch::Tensor& tensor, const Options& options = {});
// `tensor` takes the root rank's values.
void broadcast(Context& ctx, torch::Tensor& tensor, const Options& options = {});
// Every rank's `input`, concatenated along dimension 0 in rank order:
// shape [size() * input.size(0), ...] (a 0-d input gives shape [size()]).
torch::Tensor allGather(Context& ctx, const torch::Tensor& input, const Options& options = {});
// `input` (dimension 0 divisible by size()) reduced over all ranks; rank r
// gets the r-th of size() equal slices along dimension 0.
torch::Tensor reduceScatter(Context& ctx, const torch::Tensor& input, const Options& options = {});
// Returns when every rank has called it.
void barrier(Context& ctx, const Options& options = {});

}  // namespace dtrain::dist
