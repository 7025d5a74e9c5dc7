// TrainStep: one data-parallel training step (zero grads, the model's loss
// under autocast, backward with DataParallel's bucketed all-reduce,
// optimizer step), run eagerly or replayed from a CUDA graph. It knows
// nothing of where its batches come from.
//
// Contract:
// - run(inputs, targets) trains on one batch and adds its loss to lossSum(),
//   a float32 scalar on the device; nothing in run() reads the device, so
//   the host never waits for the GPU (read lossSum() at log intervals).
// - With accumulation K > 1 the batch's rows are split into K equal
//   micro-batches (ConfigError when K does not divide them); the first K-1
//   backwards only accumulate (DataParallel::noSync), the last all-reduces,
//   and the update sees the mean of the K micro-batch gradients, exactly as
//   one batch of all rows would (for a loss that is a mean over rows).
// - Gradient clipping computes the global norm and the clip coefficient on
//   the device (clipGradNormOnDevice), so it is part of a captured step.
//   With ZeRO-2 (DataParallel's shard_gradients) it clips this rank's
//   gradient shard by the norm over all ranks' shards (one all-reduce of
//   the squared norm, stream-ordered on CUDA).
// - ZeRO-2 reduces every micro-batch's gradients (DataParallel has no full
//   gradient to accumulate into) and they add up in the shard.
// - With cuda_graphs on a CUDA device: each batch size is run eagerly for
//   warmup_steps steps (cuDNN picks its algorithms, NCCL and the allocator
//   settle), then one step is captured into a CUDA graph together with the
//   all-reduce of every bucket and the optimizer update, and every later
//   step of that size copies the batch into the graph's static inputs and
//   replays it. A batch of another size (the last of an epoch) gets its own
//   graph the same way. The optimizer switches to capturable mode (device
//   lr), so learning-rate schedules work unchanged.
// - An observer (setObserver) hears the phases of each eager step as they
//   are queued: "forward", "backward", "optimizer", then "end"; a replayed
//   step is "step (CUDA graph replay)" then "end". Nothing is observed while
//   a step is captured: DataParallel's observer is detached for the capture
//   and put back after it.
// - Where a graph cannot be used (CPU, a build without CUDA, fp16 loss
//   scaling, which decides on the host, a communicator that cannot be
//   captured, or a capture that fails), graphStatus() says why and every
//   step runs eagerly.
// - On a CUDA device (without fp16 scaling) the optimizer is in capturable
//   mode from the second step on, graphs or not, so eager and graphed steps
//   compute the same arithmetic.
// - All GPU work runs on the caller's current stream. A graph cannot be
//   captured on the default (legacy) stream, and autograd runs each
//   parameter's gradient accumulation on the stream that was current when
//   DataParallel was built: build DataParallel and train under one
//   JobStreamGuard (dtrain train and bench train do).
// - A graphed step does not see a collective fail the way an eager one
//   does (the all-reduce is a node of the graph): a dead peer is noticed by
//   the launcher, which stops the group.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "dtrain/amp.h"
#include "dtrain/data_parallel.h"
#include "dtrain/optim.h"
#include "models/model.h"
#include "parallel/parallel_plan.h"  // ComputePrecision

namespace dtrain {

// --precision as autocast's precision (the one place the flag's enum
// becomes dtrain::Precision).
Precision autocastPrecision(ComputePrecision precision);

// What one step trains on: inputs and targets of the same rows, and for
// rows of packed samples their positions (models::Model::packedLoss;
// undefined: one sequence per row, Model::loss). Accumulation splits all
// three by rows; a CUDA graph keeps static copies of all three.
struct StepBatch {
  torch::Tensor inputs;
  torch::Tensor targets;
  torch::Tensor positions;
};

// Hears where a step is (see the contract). Must not throw.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void phase(const char* name) = 0;
};

struct TrainStepOptions {
  bool cuda_graphs = false;
  int64_t warmup_steps = 3;        // eager steps of a batch size before its capture
  Precision precision = Precision::kFp32;
  double clip_grad_norm = 0;       // 0 = off
  bool communicator_capturable = true;  // false for Gloo
  // Micro-batches per step: a batch of rows is split into this many equal
  // parts, each forward and backward in turn (gradients all-reduced after
  // the last only), then one optimizer update with the mean loss.
  int64_t accumulation = 1;
  // Of the gradient norm's all-reduce (ZeRO-2 clipping).
  std::chrono::milliseconds collective_timeout{std::chrono::minutes(10)};
  // Tensor parallelism: how many ranks hold a copy of each parameter
  // (DataParallel::parameters() index; absent: 1, a part of its own) and
  // the group whose squared-norm parts make the global norm (the tp group,
  // or with sharded gradients every rank). Copies count once.
  std::map<int, int> parameter_copies;
  std::shared_ptr<Communicator> norm_communicator;
  // Hybrid sharding (--dp-replicate with a --shard stage): the group of the
  // replicas of this rank's shard. After backward the gradients this rank
  // holds (its shards; ZeRO-1: the slabs) are summed over it and divided by
  // its size, so every replica steps with the mean over all data shares.
  std::shared_ptr<Communicator> replica_communicator;
  // A batch's forwards and backwards run another way than the
  // accumulation loop (a pipeline's schedule, parallel/pipeline_model.h):
  // given the batch, it leaves the step's gradients reduced and returns
  // the batch's mean loss, detached. Accumulation stays 1 with it.
  // It names its phases (StepObserver's) through the function it is given.
  std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const std::function<void(const char*)>&)>
      forward_backward;
  // Why CUDA graphs cannot capture this job's step ("": nothing known here).
  std::string graphs_unsupported;
};

class TrainStep {
 public:
  TrainStep(models::Model& model, DataParallel& dp, Optimizer& optimizer, GradScaler& scaler, torch::Device device,
            TrainStepOptions options);
  ~TrainStep();
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  void run(const torch::Tensor& inputs, const torch::Tensor& targets) { run(StepBatch{inputs, targets, {}}); }
  void run(const StepBatch& batch);
  // Micro-batches per step (see the contract); before the first run().
  void setAccumulation(int64_t micro_batches);
  int64_t accumulation() const { return options_.accumulation; }

  // Sum of the losses of the steps since the last zeroLossSum().
  const torch::Tensor& lossSum() const { return loss_sum_; }
  void zeroLossSum() { loss_sum_.zero_(); }

  // "" when graphs were not asked for; else "captured N graph(s)",
  // "warming up", or why steps run eagerly.
  std::string graphStatus() const;
  int64_t graphedSteps() const { return graphed_steps_; }
  bool lastStepGraphed() const { return last_graphed_; }
  int64_t eagerSteps() const { return eager_steps_; }
  // Not owned; nullptr: none.
  void setObserver(StepObserver* observer) { observer_ = observer; }
  StepObserver* observer() const { return observer_; }

 private:
  struct Graph;
  void eager(const StepBatch& batch);
  void body(const StepBatch& batch);
  void clipGradients();
  void trackWeightMaxima();
  // Hybrid sharding: the mean of the held gradients over the replicas.
  void reduceAcrossReplicas();
  // The clip of a tensor-parallel job: each copy counted once.
  void clipTensorParallel(const std::vector<FlatSlab>& held);
  // Forward and backward of every micro-batch; the mean loss (detached).
  torch::Tensor forwardBackward(const StepBatch& batch);
  // The model's loss of one micro-batch.
  torch::Tensor modelLoss(const torch::Tensor& inputs, const torch::Tensor& targets, const torch::Tensor& positions);
  void replay(Graph& graph, const StepBatch& batch);
  bool capture(int64_t key, const StepBatch& batch);
  bool captureInto(Graph& graph);
  void mark(const char* phase) {
    if (observer_ != nullptr && !capturing_) observer_->phase(phase);
  }

  models::Model& model_;
  DataParallel& dp_;
  Optimizer& optimizer_;
  GradScaler& scaler_;
  torch::Device device_;
  TrainStepOptions options_;
  torch::Tensor loss_sum_;
  std::string fallback_;                 // why graphs are off ("" = usable)
  // Per batch size (x 2, + 1 with positions): eager steps, and the graph.
  std::map<int64_t, int64_t> seen_;
  std::map<int64_t, std::unique_ptr<Graph>> graphs_;
  int64_t graphed_steps_ = 0;
  int64_t eager_steps_ = 0;
  // Tensor parallelism: views of the gradients other tp ranks hold copies
  // of, with the share of their squares to take off (found at the first clip).
  bool copies_found_ = false;
  std::vector<std::pair<torch::Tensor, double>> copied_grads_;
  // FP8: each 2-D parameter and the slot where the optimizer's step keeps
  // its absolute maximum (noted after each step that wrote them).
  std::vector<std::pair<torch::Tensor, torch::Tensor>> weight_maxima_;
  bool last_graphed_ = false;
  bool capturing_ = false;
  StepObserver* observer_ = nullptr;
};

// Makes a side stream of `device` current for the guard's scope (nothing on
// the CPU): the stream a whole training job runs on.
class JobStreamGuard {
 public:
  explicit JobStreamGuard(torch::Device device);
  ~JobStreamGuard();
  JobStreamGuard(const JobStreamGuard&) = delete;
  JobStreamGuard& operator=(const JobStreamGuard&) = delete;

 private:
  std::shared_ptr<void> guard_;
};

// The reason CUDA graphs cannot be used for this configuration, or "".
std::string cudaGraphsUnsupportedReason(torch::Device device, Precision precision, bool communicator_capturable);

}  // namespace dtrain
