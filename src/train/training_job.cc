#include "train/training_job.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#if DTRAIN_TORCH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "common/error.h"

namespace dtrain {
namespace {

// Shares the cores among the ranks of this node (torchrun's
// OMP_NUM_THREADS advice), unless the user chose a thread count.
void shareCores(const Context& ctx) {
  if (std::getenv("OMP_NUM_THREADS") != nullptr) return;
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
  if (options.kind == "sgd") {
    SGDOptions o;
    o.lr = options.lr;
    o.momentum = options.momentum;
    o.weight_decay = options.weight_decay;
    o.nesterov = options.nesterov;
    return makeSGD(slabs, o);
  }
  if (options.kind == "adamw") {
    AdamWOptions o;
    o.lr = options.lr;
    o.beta1 = options.beta1;
    o.beta2 = options.beta2;
    o.weight_decay = options.weight_decay;
    return makeAdamW(slabs, o);
  }
  throw ConfigError("--optimizer '" + options.kind + "': unknown; expected one of sgd or adamw");
}

TrainingJob::TrainingJob(const JobParts& parts, const ModelFactory& make_model)
    : precision_(parsePrecision(parts.execution.precision)) {
  configureKernels(parts.execution);
  InitOptions init_options;
  init_options.backend = parts.parallel.backend;
  init_options.collective_timeout = std::chrono::seconds(parts.parallel.timeout_s);
  ctx_ = init(init_options);
  shareCores(*ctx_);
  stream_ = std::make_unique<JobStreamGuard>(ctx_->device());  // a capturable stream for the whole job

  torch::manual_seed(parts.seed);
  model_ = make_model();
  if (parts.channels_last) useChannelsLast(*model_);
  model_->to(ctx_->device());

  DataParallelOptions dp_options;
  dp_options.bucket_mb = parts.parallel.bucket_mb;
  dp_options.timeout = ctx_->collectiveTimeout();
  dp_options.no_weight_decay = model_->noWeightDecayParameters();
  const bool shard_optimizer = parts.parallel.shard == "optimizer";
  // Equal slices of 64-element multiples, so every slice stays aligned.
  if (shard_optimizer) dp_options.slab_multiple = int64_t{64} * ctx_->size();
  dp_ = std::make_unique<DataParallel>(model_, ctx_->communicator(), dp_options);
  if (shard_optimizer) {
    std::vector<int64_t> logical;
    for (size_t i = 0; i < dp_->slabs().size(); ++i) logical.push_back(dp_->slabNumel(i));
    const OptimizerOptions options = parts.optimizer;
    optimizer_ = makeShardedOptimizer(
        dp_->slabs(), logical, ctx_->communicator(),
        [&options](std::vector<FlatSlab> slices) { return makeOptimizer(options, slices); },
        ctx_->collectiveTimeout());
  } else {
    optimizer_ = makeOptimizer(parts.optimizer, dp_->slabs());
  }
  GradScalerOptions scaler_options;
  scaler_options.enabled = precision_ == Precision::kFp16;
  scaler_ = std::make_unique<GradScaler>(scaler_options);

  TrainStepOptions step_options;
  step_options.cuda_graphs = parts.execution.cuda_graphs;
  step_options.warmup_steps = parts.execution.graph_warmup;
  step_options.precision = precision_;
  step_options.clip_grad_norm = parts.optimizer.clip_grad_norm;
  step_options.communicator_capturable = ctx_->backend() == "nccl";
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
  for (const FlatSlab& slab : dp_->slabs()) bytes += slab.grad.numel() * slab.grad.element_size();
  return bytes;
}

}  // namespace dtrain
