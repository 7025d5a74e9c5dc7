// dtrain::dist: the public tensor collectives over the context's Communicator.
#include "dtrain/collectives.h"

#include <string>

#include "comm/communicator.h"
#include "common/error.h"
#include "parallel/tensor_buffer.h"

namespace dtrain::dist {
namespace {

dtrain::ReduceOp commOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return dtrain::ReduceOp::kSum;
    case ReduceOp::kAvg: return dtrain::ReduceOp::kAvg;
    case ReduceOp::kMin: return dtrain::ReduceOp::kMin;
    case ReduceOp::kMax: return dtrain::ReduceOp::kMax;
    case ReduceOp::kProduct: return dtrain::ReduceOp::kProd;
  }
  throw ConfigError("dtrain::dist: unknown ReduceOp " + std::to_string(static_cast<int>(op)));
}

std::chrono::milliseconds timeoutOf(const Context& ctx, const Options& options) {
  return options.timeout.count() > 0 ? options.timeout : ctx.collectiveTimeout();
}

// The tensor a collective may use: contiguous, on the context's device.
void checkTensor(const Context& ctx, const torch::Tensor& tensor, const char* what) {
  if (!tensor.defined()) throw ConfigError(std::string("dtrain::dist::") + what + ": the tensor is undefined");
  if (tensor.device() != ctx.device()) {
    throw ConfigError(std::string("dtrain::dist::") + what + ": the tensor is on " + tensor.device().str() +
                      "; expected the context's device " + ctx.device().str());
  }
  if (!tensor.is_contiguous()) {
    throw ConfigError(std::string("dtrain::dist::") + what + ": the tensor is not contiguous; call .contiguous() first");
  }
}

void run(Context& ctx, const std::shared_ptr<Work>& work, const Options& options) {
  work->wait(timeoutOf(ctx, options));
}

}  // namespace

void allReduce(Context& ctx, torch::Tensor& tensor, const Options& options) {
  checkTensor(ctx, tensor, "allReduce");
  if (tensor.numel() == 0) return;
  const Buffer buffer = bufferOf(tensor, currentStreamOf(tensor));
  AllreduceOptions o;
  o.op = commOp(options.op);
  o.timeout = timeoutOf(ctx, options);
  run(ctx, ctx.communicator()->allreduce(buffer, buffer, o), options);
}

void broadcast(Context& ctx, torch::Tensor& tensor, const Options& options) {
  checkTensor(ctx, tensor, "broadcast");
  if (options.root < 0 || options.root >= ctx.size()) {
    throw ConfigError("dtrain::dist::broadcast: root " + std::to_string(options.root) + " is not a rank of this job (0.." +
                      std::to_string(ctx.size() - 1) + ")");
  }
  if (tensor.numel() == 0) return;
  BroadcastOptions o;
  o.root = options.root;
  o.timeout = timeoutOf(ctx, options);
  run(ctx, ctx.communicator()->broadcast(bufferOf(tensor, currentStreamOf(tensor)), o), options);
}

torch::Tensor allGather(Context& ctx, const torch::Tensor& input, const Options& options) {
  checkTensor(ctx, input, "allGather");
  const torch::Tensor in = input.dim() == 0 ? input.reshape({1}) : input;
  std::vector<int64_t> sizes = in.sizes().vec();
  sizes[0] *= ctx.size();
  torch::Tensor out = torch::empty(sizes, in.options());
  if (in.numel() == 0) return out;
  void* stream = currentStreamOf(in);
  AllgatherOptions o;
  o.timeout = timeoutOf(ctx, options);
  run(ctx, ctx.communicator()->allgather(bufferOf(in, stream), bufferOf(out, stream), o), options);
  return out;
}

torch::Tensor reduceScatter(Context& ctx, const torch::Tensor& input, const Options& options) {
  checkTensor(ctx, input, "reduceScatter");
  if (input.dim() == 0 || input.size(0) % ctx.size() != 0) {
    throw ConfigError("dtrain::dist::reduceScatter: the input's shape " + toString(input.sizes()) +
                      " does not split into " + std::to_string(ctx.size()) +
                      " equal slices along dimension 0; expected its first size to be a multiple of the job's size");
  }
  std::vector<int64_t> sizes = input.sizes().vec();
  sizes[0] /= ctx.size();
  torch::Tensor out = torch::empty(sizes, input.options());
  if (out.numel() == 0) return out;
  void* stream = currentStreamOf(input);
  ReduceScatterOptions o;
  o.op = commOp(options.op);
  o.timeout = timeoutOf(ctx, options);
  run(ctx, ctx.communicator()->reduceScatter(bufferOf(input, stream), bufferOf(out, stream), o), options);
  return out;
}

void barrier(Context& ctx, const Options& options) {
  BarrierOptions o;
  o.timeout = timeoutOf(ctx, options);
  run(ctx, ctx.communicator()->barrier(o), options);
}

}  // namespace dtrain::dist
