#include "parallel/unit_gather.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "comm/communicator.h"
#include "common/error.h"
#include "parallel/tensor_buffer.h"

#if DTRAIN_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "gpu/cuda_check.h"
#endif

namespace dtrain {
namespace {

// Autograd nodes outlive nothing they must not: they name their listener
// by id, and a node whose listener is gone does nothing.
struct Registry {
  std::mutex mutex;
  std::unordered_map<int64_t, std::weak_ptr<BackwardListener>> by_id;
  int64_t next_id = 1;
};
Registry& registry() {
  static Registry instance;
  return instance;
}

std::shared_ptr<BackwardListener> lookup(int64_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.by_id.find(id);
  return it == r.by_id.end() ? nullptr : it->second.lock();
}

// The identity on a unit's outputs whose backward is the unit's "before
// backward".
class UnitBoundary : public torch::autograd::Function<UnitBoundary> {
 public:
  // The tensors come as a TensorList: that is how Function::apply (1.13
  // and 2.x) sees a varying number of them as inputs.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList outputs,
                                                int64_t id, int64_t unit) {
    ctx->saved_data["id"] = id;
    ctx->saved_data["unit"] = unit;
    return outputs.vec();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    if (auto listener = lookup(ctx->saved_data["id"].toInt())) {
      listener->beforeBackward(static_cast<int>(ctx->saved_data["unit"].toInt()));
    }
    grads.emplace_back();  // id
    grads.emplace_back();  // unit
    return grads;
  }
};

}  // namespace

BackwardListener::~BackwardListener() {
  if (registry_id_ == 0) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.by_id.erase(registry_id_);
}

void BackwardListener::listen(const std::shared_ptr<BackwardListener>& self) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  registry_id_ = r.next_id++;
  r.by_id[registry_id_] = self;
}

std::vector<torch::Tensor> BackwardListener::wrapOutputs(int unit, std::vector<torch::Tensor> outputs) const {
  if (!torch::GradMode::is_enabled()) return outputs;
  // Only defined outputs that need gradients take part in backward.
  torch::autograd::variable_list wrapped;
  std::vector<size_t> where;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].defined() && outputs[i].requires_grad()) {
      wrapped.push_back(outputs[i]);
      where.push_back(i);
    }
  }
  if (wrapped.empty()) return outputs;
  torch::autograd::variable_list out =
      UnitBoundary::apply(at::TensorList(wrapped), registry_id_, static_cast<int64_t>(unit));
  for (size_t k = 0; k < where.size(); ++k) outputs[where[k]] = out[k];
  return outputs;
}

std::shared_ptr<BackwardStart> BackwardStart::create(std::function<void()> on_backward_start) {
  std::shared_ptr<BackwardStart> hooks(new BackwardStart(std::move(on_backward_start)));
  hooks->listen(hooks);
  return hooks;
}

std::vector<torch::Tensor> BackwardStart::afterForward(int unit, std::vector<torch::Tensor> outputs) {
  return unit == 0 ? wrapOutputs(0, std::move(outputs)) : outputs;
}

void BackwardStart::beforeBackward(int unit) {
  if (unit == 0 && on_start_) on_start_();
}

struct UnitGather::Streams {
  bool cuda = false;
  std::vector<char> waited;  // per unit: the compute stream waited on its last gather
#if DTRAIN_TORCH_CUDA
  int device = 0;
  std::optional<c10::cuda::CUDAStream> gather;
  std::vector<cudaEvent_t> released;  // per slot, recorded on the compute stream
  std::vector<cudaEvent_t> gathered;  // per unit, recorded on the gather stream

  cudaStream_t compute() const {
    return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
  }
  ~Streams() {
    for (cudaEvent_t e : released) cudaEventDestroy(e);
    for (cudaEvent_t e : gathered) cudaEventDestroy(e);
  }
#endif
};

std::shared_ptr<UnitGather> UnitGather::create(std::vector<Unit> units, std::shared_ptr<Communicator> comm,
                                               std::chrono::milliseconds timeout,
                                               std::function<void()> on_backward_start, Residency residency) {
  std::shared_ptr<UnitGather> gather(
      new UnitGather(std::move(units), std::move(comm), timeout, std::move(on_backward_start), residency));
  gather->listen(gather);
  return gather;
}

UnitGather::UnitGather(std::vector<Unit> units, std::shared_ptr<Communicator> comm, std::chrono::milliseconds timeout,
                       std::function<void()> on_backward_start, Residency residency)
    : units_(std::move(units)),
      comm_(std::move(comm)),
      timeout_(timeout),
      on_backward_start_(std::move(on_backward_start)),
      kept_(residency == Residency::kKept),
      streams_(std::make_unique<Streams>()) {
  if (!comm_) throw ConfigError("UnitGather: no communicator");
  if (units_.empty() || units_[0].slot != 0) throw ConfigError("UnitGather: unit 0 (the root) must use slot 0");
  int slots = 1;
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& unit = units_[u];
    if (u > 0 && unit.slot < 1) {
      throw ConfigError("UnitGather: unit " + std::to_string(u) + " uses slot " + std::to_string(unit.slot) +
                        "; blocks use slots 1..");
    }
    if (kept_ && u > 0 && unit.slot != static_cast<int>(u)) {
      throw ConfigError("UnitGather: unit " + std::to_string(u) + " uses slot " + std::to_string(unit.slot) +
                        "; kept units have a slot each");
    }
    if (unit.parts.empty() && (u > 0 || !kept_)) {
      throw ConfigError("UnitGather: unit " + std::to_string(u) + " has no parameters");
    }
    for (const Part& part : unit.parts) {
      if (part.whole.numel() != part.source.numel() * comm_->size() || part.whole.dim() != 1 ||
          !part.source.is_floating_point() || !part.whole.is_floating_point()) {
        throw ConfigError("UnitGather: unit " + std::to_string(u) + " gathers " +
                          std::to_string(part.source.numel()) + " elements per rank into " +
                          std::to_string(part.whole.numel()) + "; expected a flat slot slice " +
                          std::to_string(comm_->size()) + " times as large, both floating point");
      }
    }
    slots = std::max(slots, unit.slot + 1);
  }
  resident_.assign(static_cast<size_t>(slots), -1);
  streams_->waited.assign(units_.size(), 1);
  const auto with_parts = std::find_if(units_.begin(), units_.end(), [](const Unit& u) { return !u.parts.empty(); });
  if (with_parts == units_.end()) throw ConfigError("UnitGather: no unit has parameters");
  const torch::Tensor& some = with_parts->parts[0].whole;
  streams_->cuda = some.is_cuda();
#if DTRAIN_TORCH_CUDA
  if (streams_->cuda) {
    streams_->device = some.device().index();
    streams_->gather =
        c10::cuda::getStreamFromPool(/*isHighPriority=*/true, static_cast<c10::DeviceIndex>(streams_->device));
    const auto make = [] {
      cudaEvent_t event = nullptr;
      DTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      return event;
    };
    for (int s = 0; s < slots; ++s) streams_->released.push_back(make());
    for (size_t u = 0; u < units_.size(); ++u) streams_->gathered.push_back(make());
  }
#endif
}

UnitGather::~UnitGather() = default;

void UnitGather::checkUnit(int unit) const {
  if (unit < 0 || unit >= static_cast<int>(units_.size())) {
    throw ConfigError("UnitGather: unit " + std::to_string(unit) + " of a model with " +
                      std::to_string(units_.size()) + " units");
  }
}

void UnitGather::beforeForward(int unit) {
  checkUnit(unit);
  if (unit == 0) {
    if (kept_) {  // the units gathered in this step are still there
      ensure(0);
      if (units_.size() > 1) prefetch(1);
      return;
    }
    // A new forward: whatever ran before (the last backward, an optimizer
    // step) is queued, every slot may be refilled, and the shards may have
    // changed since the slots were filled.
    invalidate();
    for (size_t s = 0; s < resident_.size(); ++s) releaseSlot(static_cast<int>(s));
    ensure(0);
    if (units_.size() > 1) prefetch(1);
    return;
  }
  if (unit >= 2 && !kept_) releaseSlot(units_[static_cast<size_t>(unit) - 1].slot);
  ensure(unit);
  if (unit + 1 < static_cast<int>(units_.size())) prefetch(unit + 1);
}

std::vector<torch::Tensor> UnitGather::afterForward(int unit, std::vector<torch::Tensor> outputs) {
  checkUnit(unit);
  return wrapOutputs(unit, std::move(outputs));
}

void UnitGather::beforeBackward(int unit) {
  checkUnit(unit);
  if (unit == 0) {
    ensure(0);
    if (on_backward_start_) on_backward_start_();
    return;
  }
  // Unit + 1's backward has read its parameters (its inputs' gradient is here).
  if (unit + 1 < static_cast<int>(units_.size()) && !kept_) releaseSlot(units_[static_cast<size_t>(unit) + 1].slot);
  ensure(unit);
  if (unit >= 2) prefetch(unit - 1);
}

void UnitGather::invalidate() { std::fill(resident_.begin(), resident_.end(), -1); }

void UnitGather::ensure(int unit) {
  prefetch(unit);
  Streams& s = *streams_;
  if (s.waited[static_cast<size_t>(unit)]) return;
  s.waited[static_cast<size_t>(unit)] = 1;
#if DTRAIN_TORCH_CUDA
  if (s.cuda) DTRAIN_CUDA_CHECK(cudaStreamWaitEvent(s.compute(), s.gathered[static_cast<size_t>(unit)], 0));
#endif
}

void UnitGather::prefetch(int unit) {
  if (resident_[static_cast<size_t>(units_[static_cast<size_t>(unit)].slot)] != unit) issue(unit);
}

void UnitGather::issue(int unit) {
  const Unit& u = units_[static_cast<size_t>(unit)];
  Streams& s = *streams_;
  AllgatherOptions options;
  options.timeout = timeout_;
  void* stream = nullptr;
#if DTRAIN_TORCH_CUDA
  if (s.cuda) {
    // After the slot's last readers and the shards' last update (both
    // queued on the compute stream before the slot's release was recorded;
    // a kept slot is released here, after the optimizer step that queued).
    if (kept_) releaseSlot(u.slot);
    stream = s.gather->stream();
    DTRAIN_CUDA_CHECK(cudaStreamWaitEvent(s.gather->stream(), s.released[static_cast<size_t>(u.slot)], 0));
  }
#endif
  std::vector<std::shared_ptr<Work>> works;
  torch::NoGradGuard no_grad;
  for (const Part& part : u.parts) {
    const int64_t n = part.source.numel();
    const torch::Tensor own = part.whole.narrow(0, comm_->rank() * n, n);
    {
#if DTRAIN_TORCH_CUDA
      // The cast runs on the gather stream, ordered after the slot's release.
      std::optional<c10::cuda::CUDAStreamGuard> guard;
      if (s.cuda) guard.emplace(*s.gather);
#endif
      own.copy_(part.source);
    }
    works.push_back(comm_->allgather(bufferOf(own, stream), bufferOf(part.whole, stream), options));
  }
#if DTRAIN_TORCH_CUDA
  if (s.cuda) DTRAIN_CUDA_CHECK(cudaEventRecord(s.gathered[static_cast<size_t>(unit)], s.gather->stream()));
#endif
  if (!s.cuda) {
    for (const auto& work : works) work->wait(timeout_);
  }
  s.waited[static_cast<size_t>(unit)] = s.cuda ? 0 : 1;
  resident_[static_cast<size_t>(u.slot)] = unit;
  ++gathers_issued_;
}

void UnitGather::releaseSlot(int slot) {
#if DTRAIN_TORCH_CUDA
  Streams& s = *streams_;
  if (s.cuda) DTRAIN_CUDA_CHECK(cudaEventRecord(s.released[static_cast<size_t>(slot)], s.compute()));
#else
  (void)slot;
#endif
}

}  // namespace dtrain
