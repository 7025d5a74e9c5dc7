// TensorParallelGroup (parallel/tensor_parallel.h): the tp group's
// collectives, run on the caller's stream or started on a side stream
// (PendingCollective), timed for --breakdown, and the registry the
// autograd functions of tensor_parallel.cc find a group by.
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "comm/communicator.h"
#include "common/error.h"
#include "parallel/tensor_buffer.h"
#include "parallel/tensor_parallel.h"

#if DTRAIN_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace dtrain {
namespace tp::detail {

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

}  // namespace tp::detail

namespace {

using tp::detail::checkedDim;
using tp::detail::checkEqualParts;

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

}  // namespace dtrain
