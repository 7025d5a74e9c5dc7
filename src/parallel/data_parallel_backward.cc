// DataParallel's driver of each backward: a hook on every parameter's
// gradient accumulator counts the gradients into their buckets, and a
// bucket whose gradients are all there goes to the gradient
// synchronisation piece (grad_sync.h) in the launch order every rank
// shares; at the end of backward the piece's collectives are joined.
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "libtorch/compat.h"
#include "parallel/data_parallel_impl.h"

#if DTRAIN_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <optional>

#include "gpu/cuda_check.h"
#endif

namespace dtrain {
namespace {

// Runs `fn` after the parameter's gradient was accumulated (a post hook on
// its AccumulateGrad node, as DDP's reducer does). Written against the
// FunctionPostHook interface, which 1.13 and 2.x share.
class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

// Writes the first gradient of a backward over a stale slot: copies it
// into the slab and hands AccumulateGrad nothing to add (its post hooks
// still run); later gradients go through as they came. Runs before the
// accumulator and, from libtorch 2.1, after the tensor's own hooks; with
// 1.13, which runs those inside the accumulator, it zeros the stale slot
// and lets the accumulator add as before.
class FirstGradientHook : public torch::autograd::FunctionPreHook {
 public:
  explicit FirstGradientHook(std::shared_ptr<SlabGradient> slot) : slot_(std::move(slot)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    if (grads.size() != 1 || !grads[0].defined() || grads[0].is_sparse() || !slot_->takeStaleFlag()) {
      return grads;
    }
    torch::NoGradGuard no_grad;
    if (!compat::kTensorHooksBeforeAccumulatorPreHooks) {
      slot_->grad().zero_();
      return grads;
    }
    slot_->grad().copy_(grads[0]);
    return {torch::Tensor()};
  }

 private:
  std::shared_ptr<SlabGradient> slot_;
};

// A sharded-gradient parameter's slot: its bucket's staging buffer, asked
// of the piece under the driver's lock.
class StagedGradient : public models::GradientSlot {
 public:
  explicit StagedGradient(std::function<torch::Tensor()> take) : take_(std::move(take)) {}
  torch::Tensor takeStale() override { return take_(); }

 private:
  std::function<torch::Tensor()> take_;
};

#if DTRAIN_TORCH_CUDA
cudaEvent_t makeEvent() {
  cudaEvent_t event = nullptr;
  DTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}
#endif

}  // namespace

DataParallel::Impl::~Impl() {
  for (size_t i = 0; i < grad_slots.size(); ++i) models::unregisterGradientSlot(layout.params[i], grad_slots[i].get());
#if DTRAIN_TORCH_CUDA
  for (cudaEvent_t e : ready_events) cudaEventDestroy(e);
  if (joined_event != nullptr) cudaEventDestroy(joined_event);
#endif
}

// The per-backward bookkeeping, the communication stream, and a hook on
// every parameter's gradient accumulator.
void DataParallel::Impl::installHooks() {
  const std::vector<Bucket>& buckets = layout.buckets;
  initial_pending.assign(buckets.size(), 0);
  for (size_t b = 0; b < buckets.size(); ++b) initial_pending[b] = static_cast<int>(buckets[b].params.size());
  pending = initial_pending;
  ready.assign(buckets.size(), 0);
#if DTRAIN_TORCH_CUDA
  if (sync.cuda) {
    for (size_t b = 0; b < buckets.size(); ++b) ready_events.push_back(makeEvent());
    joined_event = makeEvent();
  }
#endif
  std::weak_ptr<Impl> weak = weak_self;
  const bool in_slabs = !sharded_parameters && grad_sync->keepsFullGradients();
  for (size_t i = 0; i < layout.params.size(); ++i) {
    std::shared_ptr<torch::autograd::Node> accumulator = torch::autograd::impl::grad_accumulator(layout.params[i]);
    const int index = static_cast<int>(i);
    if (in_slabs) {
      auto slot = std::make_shared<SlabGradient>(layout.params[i].grad());
      accumulator->add_pre_hook(std::make_unique<FirstGradientHook>(slot));
      slab_gradients.push_back(slot);
      grad_slots.push_back(std::move(slot));
    } else if (!grad_sync->keepsFullGradients()) {
      grad_slots.push_back(std::make_shared<StagedGradient>([weak, index] {
        auto impl = weak.lock();
        return impl ? impl->takeStaged(index) : torch::Tensor();
      }));
    }
    if (!grad_slots.empty()) models::registerGradientSlot(layout.params[i], grad_slots.back().get());
    accumulator->add_post_hook(std::make_unique<GradReadyHook>([weak, index] {
      if (auto impl = weak.lock()) impl->onGradReady(index);
    }));
    accumulators.push_back(std::move(accumulator));
  }
}

void DataParallel::Impl::onGradReady(int param) {
  std::lock_guard<std::mutex> lock(mutex);
  if (no_sync && !grad_sync->reducesEveryBackward()) return;
  if (!in_backward) startBackward();
  const int b = layout.bucket_of_param[static_cast<size_t>(param)];
  grad_sync->gradientReady(param, b);
  if (--pending[static_cast<size_t>(b)] != 0) return;
  bucketFilled(b);
  ready[static_cast<size_t>(b)] = 1;
#if DTRAIN_TORCH_CUDA
  if (sync.cuda) {
    DTRAIN_CUDA_CHECK(cudaEventRecord(ready_events[static_cast<size_t>(b)],
                                      static_cast<cudaStream_t>(sync.compute_stream)));
  }
#endif
  if (sync.observer != nullptr) sync.observer->bucketReady(b, sync.compute_stream);
  // Buckets start in launch order on every rank, whatever order they got ready in.
  const int count = static_cast<int>(layout.buckets.size());
  while (next_bucket < count && ready[static_cast<size_t>(launch_order[static_cast<size_t>(next_bucket)])]) {
    launchBucket(launch_order[static_cast<size_t>(next_bucket++)]);
  }
}

// The loss's gradient arrived (unit 0's hook), in the outer backward's
// graph task: the backward's bookkeeping starts here rather than at the
// first gradient, which may come from a nested (recomputing) task.
void DataParallel::Impl::backwardStarting() {
  std::lock_guard<std::mutex> lock(mutex);
  if (no_sync && !grad_sync->reducesEveryBackward()) return;  // a backward that only accumulates
  if (!in_backward) startBackward();
}

// The first gradient of a backward: check the last one's collectives (a
// failure recorded since then surfaces here) and arrange the finish.
void DataParallel::Impl::startBackward() {
  for (const auto& work : previous_works) {
    if (work->isCompleted() && work->exception()) std::rethrow_exception(work->exception());
  }
  previous_works.clear();
  in_backward = true;
#if DTRAIN_TORCH_CUDA
  // The stream backward runs this backward's gradient kernels on: the
  // current stream of the first gradient hook (autograd runs a node on its
  // forward's stream). Final callbacks may run with another current stream,
  // so the join at the end of backward uses this one (it must be the
  // capturing stream when the step is captured into a CUDA graph).
  if (sync.cuda) {
    sync.streams->compute = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(sync.device_index));
    sync.compute_stream = sync.streams->compute->stream();
  }
#endif
  grad_sync->started();
  if (sync.observer != nullptr) sync.observer->backwardStarted(sync.compute_stream);
  std::weak_ptr<Impl> weak = weak_self;
  torch::autograd::Engine::get_default_engine().queue_callback([weak] {
    if (auto alive = weak.lock()) alive->finishBackward();
  });
}

// Zeros what a bucket's stale slots still hold (parameters that got no
// gradient since zeroGrad(true)), on the compute stream, before the bucket
// is reduced.
void DataParallel::Impl::clearStale(int b) {
  if (slab_gradients.empty()) return;
#if DTRAIN_TORCH_CUDA
  std::optional<c10::cuda::CUDAStreamGuard> on_compute;
  if (sync.cuda) on_compute.emplace(*sync.streams->compute);
#endif
  torch::NoGradGuard no_grad;
  for (int p : layout.buckets[static_cast<size_t>(b)].params) {
    SlabGradient& slot = *slab_gradients[static_cast<size_t>(p)];
    if (slot.takeStaleFlag()) slot.grad().zero_();
  }
}

// A kernel's question for a sharded parameter's staging view (in a
// backward: the first gradient hook may not have run yet).
torch::Tensor DataParallel::Impl::takeStaged(int param) {
  std::lock_guard<std::mutex> lock(mutex);
  if (!in_backward) startBackward();
  return grad_sync->takeUnwritten(param, layout.bucket_of_param[static_cast<size_t>(param)]);
}

// Every gradient of bucket b is in (or backward ended): what is still
// stale zeroed and the piece's prepare, before the bucket's ready event.
void DataParallel::Impl::bucketFilled(int b) {
  clearStale(b);
  grad_sync->prepare(b);
}

void DataParallel::Impl::launchBucket(int b) {
  if (!ready[static_cast<size_t>(b)]) bucketFilled(b);
#if DTRAIN_TORCH_CUDA
  if (sync.cuda) {
    // The communication stream waits for this bucket's gradients only, so
    // the rest of backward keeps running on the compute stream.
    const auto compute = static_cast<cudaStream_t>(sync.compute_stream);
    cudaEvent_t event = ready_events[static_cast<size_t>(b)];
    if (!ready[static_cast<size_t>(b)]) DTRAIN_CUDA_CHECK(cudaEventRecord(event, compute));
    DTRAIN_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(sync.commStream()), event, 0));
  }
#endif
  works.push_back(grad_sync->launch(b));
}

void DataParallel::Impl::finishBackward() {
  std::lock_guard<std::mutex> lock(mutex);
  if (!in_backward) return;
  if (sync.observer != nullptr) sync.observer->backwardEnded(sync.compute_stream);
  // Buckets with gradients that never came (unused parameters) go now, in order.
  const int count = static_cast<int>(layout.buckets.size());
  while (next_bucket < count) launchBucket(launch_order[static_cast<size_t>(next_bucket++)]);

  std::vector<std::shared_ptr<Work>> launched;
  launched.swap(works);
  in_backward = false;
  next_bucket = 0;
  pending = initial_pending;
  std::fill(ready.begin(), ready.end(), 0);
  ++synced_backwards;

  if (sync.cuda) {
#if DTRAIN_TORCH_CUDA
    // The optimizer (on the compute stream) waits for the last collective
    // (and, sharded, the last addition into the shard); the host does not.
    DTRAIN_CUDA_CHECK(cudaEventRecord(joined_event, sync.streams->comm->stream()));
    DTRAIN_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(sync.compute_stream), joined_event, 0));
    previous_works = std::move(launched);
#endif
    return;
  }
  grad_sync->finish(launched);
}

}  // namespace dtrain
