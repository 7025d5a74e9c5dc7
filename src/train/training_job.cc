#include "train/training_job.h"

#include <algorithm>
#include <thread>

#if DTRAIN_TORCH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "comm/communicator.h"
#include "common/env.h"
#include "common/error.h"
#include "parallel/tensor_buffer.h"

namespace dtrain {
namespace {

// Shares the cores among the ranks of this node (torchrun's
// OMP_NUM_THREADS advice), unless the user chose a thread count.
void shareCores(const Context& ctx) {
  if (envString("OMP_NUM_THREADS")) return;
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  torch::set_num_threads(std::max(1, cores / std::max(1, ctx.localWorldSize())));
}

// TF32 as PyTorch's defaults: cuDNN convolutions may use TF32, float32
// matmuls do not (torch.backends.cuda.matmul.allow_tf32 = False).
void configureKernels(const ExecutionOptions& execution) {
  at::globalContext().setAllowTF32CuDNN(true);
  at::globalContext().setBenchmarkCuDNN(execution.cudnn_benchmark && !execution.deterministic);
  at::globalContext().setDeterministicCuDNN(execution.deterministic);
}

// How the plan lays DataParallel out (the one place its stage becomes
// DataParallelOptions' switches): ZeRO-1 pads each slab so that it splits
// into equal slices of 64-element multiples (every slice stays aligned);
// ZeRO-2 pads each bucket so (DataParallel does that itself).
DataParallelOptions dataParallelOptions(const ParallelPlan& plan, const Context& ctx, models::Model& model,
                                        Precision precision) {
  DataParallelOptions options;
  options.bucket_mb = plan.bucket_mb;
  options.first_bucket_mb = plan.first_bucket_mb;
  options.timeout = ctx.collectiveTimeout();
  options.no_weight_decay = model.noWeightDecayParameters();
  if (plan.shard == ShardStage::kOptimizer) options.slab_multiple = int64_t{64} * plan.dp_shard;
  if (plan.shardsGradients()) {
    options.shard_gradients = true;
    options.reduce_dtype = plan.reduce_dtype == ReduceDtype::kBf16 ? torch::kBFloat16 : torch::kFloat;
  }
  if (plan.shardsParameters()) {
    options.shard_parameters = true;
    options.param_dtype = precision == Precision::kBf16   ? torch::kBFloat16
                          : precision == Precision::kFp16 ? torch::kHalf
                                                          : torch::kFloat;
  }
  return options;
}

// The optimizer --optimizer names, over the slabs or this rank's share of
// them as the plan's stage says.
std::unique_ptr<Optimizer> makeJobOptimizer(const JobParts& parts, const ParallelPlan& plan, DataParallel& dp,
                                            Context& ctx) {
  const OptimizerOptions& options = parts.optimizer;
  const auto make = [&options](std::vector<FlatSlab> slices) { return makeOptimizer(options, slices); };
  if (plan.shard == ShardStage::kOptimizer) {
    std::vector<int64_t> logical;
    for (size_t i = 0; i < dp.slabs().size(); ++i) logical.push_back(dp.slabNumel(i));
    return makeShardedOptimizer(dp.slabs(), logical, ctx.communicator(), make, ctx.collectiveTimeout());
  }
  if (plan.shardsGradients()) {
    return makeShardedOptimizer(dp.shardLayout(), ctx.communicator(), make, ctx.collectiveTimeout());
  }
  return makeOptimizer(options, dp.slabs());
}

}  // namespace

void useChannelsLast(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : model.parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  }
  for (torch::Tensor& b : model.buffers()) {
    if (b.dim() == 4) b.set_data(b.contiguous(at::MemoryFormat::ChannelsLast));
  }
}

std::unique_ptr<Optimizer> makeOptimizer(const OptimizerOptions& options, const std::vector<FlatSlab>& slabs) {
  if (options.kind == OptimizerKind::kSgd) {
    SGDOptions o;
    o.lr = options.lr;
    o.momentum = options.momentum;
    o.weight_decay = options.weight_decay;
    o.nesterov = options.nesterov;
    return makeSGD(slabs, o);
  }
  AdamWOptions o;
  o.lr = options.lr;
  o.beta1 = options.beta1;
  o.beta2 = options.beta2;
  o.weight_decay = options.weight_decay;
  return makeAdamW(slabs, o);
}

TrainingJob::TrainingJob(const JobParts& parts, const ModelFactory& make_model)
    : precision_(autocastPrecision(parts.execution.precision)) {
  configureKernels(parts.execution);
  InitOptions init_options;
  init_options.backend = commBackendName(parts.parallel.backend);  // the library API takes the word
  init_options.collective_timeout = std::chrono::seconds(parts.parallel.timeout_s);
  ctx_ = init(init_options);
  shareCores(*ctx_);
  stream_ = std::make_unique<JobStreamGuard>(ctx_->device());  // a capturable stream for the whole job
  if (parts.preflight) parts.preflight(*ctx_, deviceName());

  torch::manual_seed(parts.seed);
  model_ = make_model();
  if (parts.channels_last) useChannelsLast(*model_);
  model_->to(ctx_->device());

  plan_ = planParallelism(parts.parallel, ctx_->size());
  DataParallelOptions dp_options = dataParallelOptions(plan_, *ctx_, *model_, precision_);
  // ZeRO-3's gathers: a communicator of their own on the GPUs (NCCL would
  // otherwise order them with the reduce-scatters).
  if (dp_options.shard_parameters && ctx_->device().is_cuda()) dp_options.gather_communicator = ctx_->newCommunicator("gather");
  dp_ = std::make_unique<DataParallel>(model_, ctx_->communicator(), std::move(dp_options));
  optimizer_ = makeJobOptimizer(parts, plan_, *dp_, *ctx_);
  GradScalerOptions scaler_options;
  scaler_options.enabled = precision_ == Precision::kFp16;
  scaler_ = std::make_unique<GradScaler>(scaler_options);
  if (scaler_options.enabled && dp_->shardsGradients()) {
    // Each rank checks only its shard: a step is skipped when any rank saw inf/nan.
    std::shared_ptr<Communicator> comm = ctx_->communicator();
    const std::chrono::milliseconds timeout = ctx_->collectiveTimeout();
    scaler_->setFoundInfReduction([comm, timeout](torch::Tensor& found_inf) {
      AllreduceOptions options;
      options.op = ReduceOp::kMax;
      options.timeout = timeout;
      void* stream = currentStreamOf(found_inf);
      comm->allreduce(bufferOf(found_inf, stream), bufferOf(found_inf, stream), options)->wait(timeout);
    });
  }

  TrainStepOptions step_options;
  step_options.cuda_graphs = parts.execution.cuda_graphs;
  step_options.warmup_steps = parts.execution.graph_warmup;
  step_options.precision = precision_;
  step_options.clip_grad_norm = parts.optimizer.clip_grad_norm;
  step_options.communicator_capturable = ctx_->backend() == "nccl";
  step_options.collective_timeout = ctx_->collectiveTimeout();
  step_ = std::make_unique<TrainStep>(*model_, *dp_, *optimizer_, *scaler_, ctx_->device(), step_options);
}

// Members go in reverse order: the step, optimizer and DataParallel before
// the model, the stream guard and the group they use.
TrainingJob::~TrainingJob() = default;

std::string TrainingJob::deviceName() const {
#if DTRAIN_TORCH_CUDA
  if (ctx_->device().is_cuda()) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, ctx_->device().index()) == cudaSuccess) return properties.name;
  }
#endif
  return ctx_->device().str();
}

int64_t TrainingJob::allreduceBytesPerStep() const {
  int64_t bytes = 0;
  for (size_t b = 0; b < dp_->buckets().size(); ++b) bytes += dp_->bucketBytes(static_cast<int>(b));
  return bytes;
}

}  // namespace dtrain
