// TrainingJob: the parts every training run assembles, in this order: the
// process group (dtrain::init), a job stream current on the device, the
// model on that device, the mesh of the plan when it has more than data
// parallelism (dp_replicate x dp_shard x tp; parallel/device_mesh.h), the
// model split over the tp group (TensorParallelModel), the parallel plan
// applied to it over the data-parallel group (parallelize(): DataParallel
// and the optimizer), the loss scaler and the step (with hybrid sharding,
// the replicas' gradient all-reduce; with tp, the whole model's norm). `dtrain
// train` and `dtrain bench train` build their runs on it; what they train
// on and how they report is theirs.
// (private to train/)
#pragma once

#include <functional>
#include <memory>

#include <torch/torch.h>

#include "dtrain/amp.h"
#include "dtrain/data_parallel.h"
#include "dtrain/init.h"
#include "dtrain/optim.h"
#include "models/model.h"
#include "parallel/device_mesh.h"
#include "parallel/parallelize.h"
#include "parallel/pipeline_model.h"
#include "parallel/tensor_parallel_plan.h"
#include "train/train_options.h"
#include "train/train_step.h"

namespace dtrain {

// Makes the model (on the CPU; the job moves it to its device). Called
// after the seed is set, so every rank builds the same initial weights.
using ModelFactory = std::function<std::shared_ptr<models::Model>()>;

struct JobParts {
  const ParallelOptions& parallel;
  const ExecutionOptions& execution;
  const OptimizerOptions& optimizer;
  bool channels_last = false;
  uint64_t seed = 0;
  // Called once the group is up and the device chosen, before the model is
  // made: what must hold before anything is allocated (the memory check).
  // Gets the context and the device's name.
  std::function<void(Context&, const std::string&)> preflight;
  // What the plan needs to know of the model (its tensor-parallel shape).
  PlannedModel planned_model;
};

class TrainingJob {
 public:
  // ConfigError for options that cannot run here (a bad combination of
  // the parallelism options, an unknown backend, fp16
  // where autocast lacks it, ...); errors of the group's start-up propagate.
  TrainingJob(const JobParts& parts, const ModelFactory& make_model);
  ~TrainingJob();
  TrainingJob(const TrainingJob&) = delete;
  TrainingJob& operator=(const TrainingJob&) = delete;

  Context& context() { return *ctx_; }
  torch::Device device() const { return ctx_->device(); }
  Precision precision() const { return precision_; }
  // The parallelism the options planned over this world.
  const ParallelPlan& plan() const { return plan_; }
  // This rank's place among the data-parallel ranks (the mesh's
  // dp_replicate x dp_shard; the world without tensor parallelism): which
  // share of the data it trains on. The ranks of one tp group share it.
  int dataRank() const { return dp_comm_->rank(); }
  int dataRanks() const { return dp_comm_->size(); }
  // The data-parallel group (DataParallel's communicator).
  const std::shared_ptr<Communicator>& dataCommunicator() const { return dp_comm_; }
  // The tensor-parallel split of the model; nullptr with --tp 1.
  const TensorParallelModel* tensorParallel() const { return tp_model_.get(); }
  models::Model& model() { return *model_; }
  DataParallel& dataParallel() { return *parallel_.data_parallel; }
  Optimizer& optimizer() { return *parallel_.optimizer; }
  GradScaler& scaler() { return *scaler_; }
  TrainStep& step() { return *step_; }
  // Bytes of gradients one step all-reduces (reduce-scatters with --shard
  // gradients), per backward.
  int64_t allreduceBytesPerStep() const;
  // The losses of the steps since the step's zeroLossSum() (TrainStep::lossSum),
  // as the last pipeline stage computed them: with --pp a collective over
  // the pipeline's ranks (every rank calls it at the same steps).
  torch::Tensor lossSum();
  // The pipeline's stages on this rank; nullptr with --pp 1.
  const PipelineModel* pipeline() const { return pipeline_.get(); }
  PipelineModel* pipeline() { return pipeline_.get(); }
  // The device's name as the driver reports it ("NVIDIA H100 80GB HBM3"), "cpu" on the CPU.
  std::string deviceName() const;

 private:
  void splitTensors();                           // --tp: tp_model_ over the whole model
  std::shared_ptr<models::Model> cutPipeline();  // --pp: this rank's stages
  void makeStep(const JobParts& parts, bool hybrid);
  void checkFp8(const JobParts& parts);        // --precision fp8: what it cannot run with

  std::shared_ptr<Context> ctx_;
  std::unique_ptr<JobStreamGuard> stream_;
  Precision precision_;
  ParallelPlan plan_;
  std::shared_ptr<models::Model> model_;
  std::unique_ptr<DeviceMesh> mesh_;           // with --tp or --dp-replicate > 1
  std::shared_ptr<Communicator> dp_comm_;
  std::unique_ptr<DeviceMesh> gather_mesh_;    // ZeRO-3 on GPUs with a mesh: the gathers' own groups
  std::unique_ptr<TensorParallelModel> tp_model_;
  std::shared_ptr<PipelineModel> pipeline_;    // with --pp; model_ is it
  ParallelModel parallel_;  // the plan applied to the model: DataParallel and the optimizer
  std::unique_ptr<GradScaler> scaler_;
  std::unique_ptr<TrainStep> step_;
};

// Casts the module's frozen floating-point parameters (requires_grad
// false: no gradient, no optimizer) to `dtype`, in place; call before
// DataParallel. TrainingJob keeps them in bf16 under --precision bf16.
void keepFrozenParametersIn(torch::nn::Module& model, torch::ScalarType dtype);

// Moves the module's 4-D parameters and buffers (conv weights) to the
// channels-last memory format, in place; call before DataParallel.
void useChannelsLast(torch::nn::Module& model);

// The optimizer the options name, over `slabs`.
std::unique_ptr<Optimizer> makeOptimizer(const OptimizerOptions& options, const std::vector<FlatSlab>& slabs);

}  // namespace dtrain
