#include "parallel/tensor_parallel.h"

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "comm/communicator.h"
#include "common/error.h"
#include "parallel/tensor_buffer.h"

#if DTRAIN_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace dtrain {
namespace {

// The live groups by id, for the autograd functions' backward (saved_data
// holds only IValues).
struct GroupRegistry {
  std::mutex mutex;
  int64_t next_id = 1;
  std::map<int64_t, const TensorParallelGroup*> by_id;
};

GroupRegistry& groupRegistry() {
  static GroupRegistry instance;
  return instance;
}

const TensorParallelGroup& groupOf(const torch::autograd::AutogradContext* ctx) {
  return TensorParallelGroup::byId(ctx->saved_data.at("group").toInt());
}

// `dim` of x, negative counting from the end; ConfigError when x has no such dimension.
int64_t checkedDim(const torch::Tensor& x, int64_t dim, const char* what) {
  const int64_t n = x.dim();
  const int64_t d = dim < 0 ? dim + n : dim;
  if (d < 0 || d >= n) {
    throw ConfigError(std::string("tensor parallelism: ") + what + ": dimension " + std::to_string(dim) +
                      " of a tensor of shape " + toString(x.sizes()) + " does not exist");
  }
  return d;
}

void checkEqualParts(const torch::Tensor& x, int64_t dim, int parts, const char* what) {
  if (x.size(dim) % parts != 0) {
    throw ConfigError(std::string("tensor parallelism: ") + what + ": the shape " + toString(x.sizes()) +
                      " does not split into " + std::to_string(parts) + " equal parts along dimension " +
                      std::to_string(dim) + " (tp " + std::to_string(parts) + ")");
  }
}

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

struct TensorParallelGroup::Async {
#if DTRAIN_TORCH_CUDA
  std::optional<c10::cuda::CUDAStream> side;  // where started collectives run from
  c10::cuda::CUDAStream sideStream(c10::DeviceIndex device) {
    if (!side || side->device_index() != device) side = c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device);
    return *side;
  }
  // (start, end) event pairs: the collectives' own, and where the caller's
  // stream waited for one.
  using Span = std::pair<at::cuda::CUDAEvent, at::cuda::CUDAEvent>;
  struct Timed {
    Span span;
    bool all_exposed = false;  // run on the caller's stream: nothing ran beside it
  };
  std::vector<Timed> whole;
  std::vector<Span> exposed;
#endif
  bool timing = false;
};

struct PendingCollective::State {
  const TensorParallelGroup* group = nullptr;
  std::shared_ptr<Work> work;
  torch::Tensor input, output;  // kept until finished: the collective uses their memory
#if DTRAIN_TORCH_CUDA
  std::optional<c10::cuda::CUDAStream> side, caller;
  std::vector<TensorParallelGroup::Async::Span>* exposed = nullptr;  // the group's timing, when on
#endif
};

PendingCollective::PendingCollective() = default;
PendingCollective::PendingCollective(PendingCollective&&) noexcept = default;
PendingCollective& PendingCollective::operator=(PendingCollective&& other) noexcept {
  if (this != &other) {
    if (state_) {
      try {
        finish();
      } catch (...) {
      }
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

PendingCollective::~PendingCollective() {
  if (!state_) return;
  try {
    finish();
  } catch (...) {
  }
}

torch::Tensor PendingCollective::finish() {
  if (!state_) throw ConfigError("tensor parallelism: a started collective was finished twice (or never started)");
  const std::unique_ptr<State> s = std::move(state_);
#if DTRAIN_TORCH_CUDA
  if (s->side) {
    std::optional<at::cuda::CUDAEvent> before;
    if (s->exposed != nullptr) {
      before.emplace(cudaEventDefault);
      before->record(*s->caller);
    }
    at::cuda::CUDAEvent done;
    done.record(*s->side);
    done.block(*s->caller);
    if (before) {
      at::cuda::CUDAEvent after(cudaEventDefault);
      after.record(*s->caller);
      s->exposed->emplace_back(std::move(*before), std::move(after));
    }
    if (std::exception_ptr error = s->work->exception()) std::rethrow_exception(error);
    return s->output;
  }
#endif
  s->work->wait(s->group->timeout());
  return s->output;
}

std::shared_ptr<TensorParallelGroup> TensorParallelGroup::create(std::shared_ptr<Communicator> comm,
                                                                 std::chrono::milliseconds timeout) {
  if (!comm) throw ConfigError("tensor parallelism: the tensor-parallel group has no communicator");
  std::shared_ptr<TensorParallelGroup> group(new TensorParallelGroup(std::move(comm), timeout));
  GroupRegistry& r = groupRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  group->id_ = r.next_id++;
  r.by_id[group->id_] = group.get();
  return group;
}

const TensorParallelGroup& TensorParallelGroup::byId(int64_t id) {
  GroupRegistry& r = groupRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.by_id.find(id);
  if (it == r.by_id.end()) {
    throw ConfigError("tensor parallelism: a backward ran after its tensor-parallel group (id " + std::to_string(id) +
                      ") was destroyed; keep the group alive while its graphs are");
  }
  return *it->second;
}

TensorParallelGroup::TensorParallelGroup(std::shared_ptr<Communicator> comm, std::chrono::milliseconds timeout)
    : comm_(std::move(comm)), timeout_(timeout), async_(std::make_unique<Async>()) {}

TensorParallelGroup::~TensorParallelGroup() {
  GroupRegistry& r = groupRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.by_id.erase(id_);
}

int TensorParallelGroup::rank() const { return comm_->rank(); }
int TensorParallelGroup::size() const { return comm_->size(); }

std::shared_ptr<Work> TensorParallelGroup::launch(Op op, const torch::Tensor& input, const torch::Tensor& output,
                                                  void* stream, ReduceOp reduce) const {
#if DTRAIN_TORCH_CUDA
  std::optional<at::cuda::CUDAEvent> before;
  const bool timed = async_->timing && input.is_cuda();
  const auto on = [&] { return c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream), input.device().index()); };
  if (timed) {
    before.emplace(cudaEventDefault);
    before->record(on());
  }
#endif
  std::shared_ptr<Work> work;
  switch (op) {
    case Op::kAllReduce: {
      AllreduceOptions options;
      options.op = reduce;
      options.timeout = timeout_;
      work = comm_->allreduce(bufferOf(input, stream), bufferOf(output, stream), options);
      break;
    }
    case Op::kAllGather: {
      AllgatherOptions options;
      options.timeout = timeout_;
      work = comm_->allgather(bufferOf(input, stream), bufferOf(output, stream), options);
      break;
    }
    case Op::kReduceScatter: {
      ReduceScatterOptions options;
      options.timeout = timeout_;
      work = comm_->reduceScatter(bufferOf(input, stream), bufferOf(output, stream), options);
      break;
    }
  }
#if DTRAIN_TORCH_CUDA
  if (timed) {
    at::cuda::CUDAEvent after(cudaEventDefault);
    after.record(on());
    async_->whole.push_back({{std::move(*before), std::move(after)}, false});
  }
#endif
  return work;
}

void TensorParallelGroup::runNow(Op op, const torch::Tensor& input, const torch::Tensor& output,
                                 ReduceOp reduce) const {
  void* stream = currentStreamOf(input);
  const std::shared_ptr<Work> work = launch(op, input, output, stream, reduce);
  if (!input.is_cuda()) {
    work->wait(timeout_);
    return;
  }
  // The caller's stream is ordered after the collective: nothing to wait for.
  if (std::exception_ptr error = work->exception()) std::rethrow_exception(error);
#if DTRAIN_TORCH_CUDA
  if (async_->timing) async_->whole.back().all_exposed = true;
#endif
}

PendingCollective TensorParallelGroup::start(Op op, const torch::Tensor& input, torch::Tensor output) const {
  PendingCollective pending;
  auto s = std::make_unique<PendingCollective::State>();
  s->group = this;
  void* stream = nullptr;
#if DTRAIN_TORCH_CUDA
  if (input.is_cuda()) {
    const c10::DeviceIndex device = input.device().index();
    s->caller = c10::cuda::getCurrentCUDAStream(device);
    s->side = async_->sideStream(device);
    at::cuda::CUDAEvent ready;
    ready.record(*s->caller);
    ready.block(*s->side);
    stream = s->side->stream();
    if (async_->timing) s->exposed = &async_->exposed;
  }
#endif
  s->work = launch(op, input, output, stream);
  s->input = input;
  s->output = std::move(output);
  pending.state_ = std::move(s);
  return pending;
}

void TensorParallelGroup::allReduce(torch::Tensor& tensor, ReduceOp op) const {
  if (size() == 1 || tensor.numel() == 0) return;
  if (!tensor.is_contiguous()) throw ConfigError("tensor parallelism: allReduce of a non-contiguous tensor");
  runNow(Op::kAllReduce, tensor, tensor, op);
}

torch::Tensor TensorParallelGroup::allGather(const torch::Tensor& tensor, int64_t dim) const {
  const int64_t d = checkedDim(tensor, dim, "all-gather");
  if (size() == 1) return tensor;
  // The collective concatenates along dimension 0: move `d` there and back.
  const torch::Tensor in = tensor.movedim(d, 0).contiguous();
  std::vector<int64_t> sizes = in.sizes().vec();
  sizes[0] *= size();
  torch::Tensor out = torch::empty(sizes, in.options());
  if (in.numel() > 0) runNow(Op::kAllGather, in, out);
  return d == 0 ? out : out.movedim(0, d).contiguous();
}

torch::Tensor TensorParallelGroup::reduceScatter(const torch::Tensor& tensor, int64_t dim) const {
  const int64_t d = checkedDim(tensor, dim, "reduce-scatter");
  checkEqualParts(tensor, d, size(), "reduce-scatter");
  if (size() == 1) return tensor;
  const torch::Tensor in = tensor.movedim(d, 0).contiguous();
  std::vector<int64_t> sizes = in.sizes().vec();
  sizes[0] /= size();
  torch::Tensor out = torch::empty(sizes, in.options());
  if (out.numel() > 0) runNow(Op::kReduceScatter, in, out);
  return d == 0 ? out : out.movedim(0, d).contiguous();
}

void TensorParallelGroup::startTiming() {
  async_->timing = true;
#if DTRAIN_TORCH_CUDA
  async_->whole.clear();
  async_->exposed.clear();
#endif
}

TensorParallelCommTime TensorParallelGroup::takeTiming() {
  TensorParallelCommTime time;
  async_->timing = false;
#if DTRAIN_TORCH_CUDA
  for (Async::Timed& t : async_->whole) {
    t.span.second.synchronize();
    const double ms = t.span.first.elapsed_time(t.span.second);
    time.total_ms += ms;
    if (t.all_exposed) time.exposed_ms += ms;
  }
  for (Async::Span& span : async_->exposed) {
    span.second.synchronize();
    time.exposed_ms += span.first.elapsed_time(span.second);
  }
  time.collectives = static_cast<int64_t>(async_->whole.size());
  async_->whole.clear();
  async_->exposed.clear();
#endif
  return time;
}

PendingCollective TensorParallelGroup::startAllGather(const torch::Tensor& tensor) const {
  if (!tensor.is_contiguous()) throw ConfigError("tensor parallelism: all-gather of a non-contiguous tensor");
  std::vector<int64_t> sizes = tensor.sizes().vec();
  sizes.insert(sizes.begin(), size());
  return start(Op::kAllGather, tensor, torch::empty(sizes, tensor.options()));
}

PendingCollective TensorParallelGroup::startReduceScatter(const torch::Tensor& tensor) const {
  if (!tensor.is_contiguous() || tensor.dim() < 1 || tensor.size(0) != size()) {
    throw ConfigError("tensor parallelism: reduce-scatter takes a contiguous [" + std::to_string(size()) +
                      ", ...] tensor, got " + toString(tensor.sizes()));
  }
  return start(Op::kReduceScatter, tensor, torch::empty(tensor.sizes().slice(1), tensor.options()));
}

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
