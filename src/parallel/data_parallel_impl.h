// DataParallel's private state (private to parallel/): the flat layout, the
// pieces it was composed of, and the driver of each backward
// (data_parallel_backward.cc), which counts gradients into buckets and
// hands each ready bucket to the gradient-synchronisation piece.
#pragma once

#include <torch/csrc/autograd/function.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/work.h"
#include "dtrain/data_parallel.h"
#include "models/gradient_slot.h"
#include "parallel/grad_sync.h"
#include "parallel/sharded_parameters.h"
#include "parallel/unit_gather.h"

#if DTRAIN_TORCH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dtrain {

// The pieces a DataParallel is composed of, chosen once (parallelize(), or
// the stage DataParallelOptions names).
struct DataParallelPieces {
  std::unique_ptr<GradSync> grad_sync;                  // never null
  std::unique_ptr<ShardedParameters> sharded_parameters;  // null: every rank holds every parameter
};

// A replicated parameter's gradient: its view into the gradient slab,
// stale from zeroGrad(true) until a gradient is written over it.
class SlabGradient : public models::GradientSlot {
 public:
  explicit SlabGradient(torch::Tensor grad) : grad_(std::move(grad)) {}
  torch::Tensor takeStale() override { return stale_.exchange(false) ? grad_ : torch::Tensor(); }
  bool takeStaleFlag() { return stale_.exchange(false); }
  void setStale(bool stale) { stale_ = stale; }
  const torch::Tensor& grad() const { return grad_; }

 private:
  torch::Tensor grad_;
  std::atomic<bool> stale_{false};
};

struct DataParallel::Impl {
  std::shared_ptr<torch::nn::Module> module;
  models::Model* model = nullptr;  // the module as a models::Model, if the caller said so
  DataParallelOptions options;
  FlatLayout layout;
  SyncContext sync;
  std::unique_ptr<GradSync> grad_sync;
  std::unique_ptr<ShardedParameters> sharded_parameters;
  // For a model with units whose parameters are not sharded: the hook on
  // the loss that starts backward's bookkeeping.
  std::shared_ptr<BackwardStart> backward_start;
  std::vector<int> launch_order;  // bucket indices, in the order every rank launches them

  // The driver's per-backward bookkeeping (guarded by mutex).
  std::mutex mutex;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;  // kept alive: params hold them weakly
  std::vector<int> initial_pending;
  std::vector<int> pending;
  std::vector<char> ready;
  int next_bucket = 0;
  bool in_backward = false;
  std::vector<std::shared_ptr<Work>> works;  // this backward's collectives, in launch order
  std::vector<std::shared_ptr<Work>> previous_works;
  bool no_sync = false;
  int64_t synced_backwards = 0;
  // Each parameter's gradient slot (models/gradient_slot.h), registered
  // while this lives: full gradients in slabs (replicated, ZeRO-1) are
  // marked stale by zeroGrad(/*set_to_none=*/true) instead of zeroed
  // (slab_gradients, by parameter; empty with sharded gradients); sharded
  // ones are their bucket's staging buffer, stale until this backward's
  // first gradient of the parameter (GradSync::takeUnwritten).
  std::vector<std::shared_ptr<models::GradientSlot>> grad_slots;
  std::vector<std::shared_ptr<SlabGradient>> slab_gradients;
#if DTRAIN_TORCH_CUDA
  // The communication stream waits on ready_events[b] before bucket b's
  // collective, and the compute stream on joined_event after the last.
  std::vector<cudaEvent_t> ready_events;
  cudaEvent_t joined_event = nullptr;
#endif

  // What the model calls around its units, if anything.
  models::UnitHooks* hooks() const {
    if (sharded_parameters) return sharded_parameters->hooks();
    return backward_start.get();
  }

  // Construction (data_parallel.cc).
  void buildLayout();
  void hookModel();

  // The driver (data_parallel_backward.cc).
  void installHooks();
  void onGradReady(int param);
  void backwardStarting();
  void startBackward();
  void launchBucket(int bucket);
  void bucketFilled(int bucket);
  void clearStale(int bucket);
  torch::Tensor takeStaged(int param);
  void finishBackward();
  ~Impl();

  // This Impl, for the callbacks that autograd and the unit hooks run
  // (they do nothing once the DataParallel is gone).
  std::weak_ptr<Impl> weak_self;
};

}  // namespace dtrain
