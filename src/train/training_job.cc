#include "train/training_job.h"

#include <algorithm>
#include <thread>

#if DTRAIN_TORCH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "comm/communicator.h"
#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "models/fp8_linear.h"
#include "models/language_model.h"
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
  models::setFp8Recipe(execution.fp8_recipe);
  at::globalContext().setAllowTF32CuDNN(true);
  at::globalContext().setBenchmarkCuDNN(execution.cudnn_benchmark && !execution.deterministic);
  at::globalContext().setDeterministicCuDNN(execution.deterministic);
}

// The options parallelize() composes the plan's pieces with: the
// optimizer --optimizer names (over whatever slabs or slices the plan's
// optimizer layout gives it), ZeRO-3's compute dtype (the autocast one)
// and, on the GPUs, a communicator of their own for ZeRO-3's gathers (NCCL
// would otherwise order them with the reduce-scatters).
ParallelizeOptions parallelizeOptions(const JobParts& parts, std::shared_ptr<Context> ctx, Precision precision) {
  ParallelizeOptions options;
  options.timeout = ctx->collectiveTimeout();
  options.param_dtype = precision == Precision::kBf16 || precision == Precision::kFp8 ? torch::kBFloat16
                        : precision == Precision::kFp16 ? torch::kHalf
                                                        : torch::kFloat;
  options.gather_communicator = [ctx]() -> std::shared_ptr<Communicator> {
    return ctx->device().is_cuda() ? ctx->newCommunicator("gather") : nullptr;
  };
  const OptimizerOptions optimizer = parts.optimizer;
  options.make_optimizer = [optimizer](std::vector<FlatSlab> slabs) { return makeOptimizer(optimizer, slabs); };
  return options;
}

// (dp_replicate, dp_shard, tp): tp innermost (parallel/device_mesh.h draws the layout).
MeshShape meshShapeOf(const ParallelPlan& plan) {
  return {{"pp", plan.pp}, {"dp_replicate", plan.dp_replicate}, {"dp_shard", plan.dp_shard}, {"tp", plan.tp}};
}

DeviceMeshOptions meshOptions(const Context& ctx, const std::string& prefix) {
  DeviceMeshOptions options;
  options.backend = ctx.backend();
  options.store_prefix = prefix;
  if (ctx.device().is_cuda()) options.communicator.device = ctx.device().index();
  options.world_communicator = ctx.communicator();
  return options;
}

// How many ranks of the norm's group hold each of DataParallel's
// parameters: tp's whole ones every tp rank, a replicated key/value head
// tp / kv_heads of them; a pipeline's tied head twice as many (its first
// and its last stage).
std::map<int, int> parameterCopies(const TensorParallelModel* tp, const PipelineModel* pipeline,
                                   const DataParallel& dp) {
  std::map<const void*, int> index;
  for (size_t i = 0; i < dp.parameters().size(); ++i) index[dp.parameters()[i].unsafeGetTensorImpl()] = static_cast<int>(i);
  std::map<int, int> copies;
  for (const auto& item : dp.module()->named_parameters(/*recurse=*/true)) {
    auto it = index.find(item.value().unsafeGetTensorImpl());
    if (it == index.end()) continue;
    int n = 1;
    if (tp != nullptr) {
      auto split = tp->parameterLayout().find(item.key());
      const int ranks = tp->group().size();
      if (split != tp->parameterLayout().end()) {
        const ParameterSplit& s = split->second;
        if (s.kind == ParameterSplit::Kind::kWhole) n = ranks;
        if (s.kind == ParameterSplit::Kind::kKvHeadRows) n = ranks / static_cast<int>(s.whole.at(0) / s.head_rows);
      }
    }
    if (pipeline != nullptr && pipeline->tiedWeight().defined() &&
        pipeline->tiedWeight().unsafeGetTensorImpl() == item.value().unsafeGetTensorImpl()) {
      n *= 2;
    }
    if (n > 1) copies[it->second] = n;
  }
  return copies;
}

}  // namespace

void keepFrozenParametersIn(torch::nn::Module& model, torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : model.parameters()) {
    if (!p.requires_grad() && p.is_floating_point()) p.set_data(p.to(dtype));
  }
}

void useChannelsLast(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : model.parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  }
  for (torch::Tensor& b : model.buffers()) {
    if (b.dim() == 4) b.set_data(b.contiguous(at::MemoryFormat::ChannelsLast));
  }
}

std::unique_ptr<Optimizer> makeOptimizer(const OptimizerOptions& given, const std::vector<FlatSlab>& slabs) {
  const OptimizerOptions options = withImageDefaults(given);  // what was not given nor resolved by model kind
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

// What FP8 cannot run with, said before any rank connects.
void TrainingJob::checkFp8(const JobParts& parts) {
  const PlannedModel& model = parts.planned_model;
  if (precision_ != Precision::kFp8) {
    if (parts.execution.fp8_recipe != models::Fp8Recipe::kTensorwise) {
      throw ConfigError("--fp8-recipe rowwise scales --precision fp8's products; this run's precision is " +
                        std::string(computePrecisionName(parts.execution.precision)) +
                        " (add --precision fp8 or drop --fp8-recipe)");
    }
    return;
  }
  if (!model.splits_by_tensor) {
    throw ConfigError("--precision fp8 with --model " + model.name +
                      ": FP8 computes the transformer blocks' linear layers (gpt2, llama); use --precision bf16");
  }
  if (plan_.tp > 1 && plan_.tp_overlap > 0) {
    throw ConfigError("--precision fp8 with --tp-overlap: the overlapped tensor-parallel products run in bf16; "
                      "drop --tp-overlap or use --precision bf16");
  }
}

TrainingJob::TrainingJob(const JobParts& parts, const ModelFactory& make_model)
    : precision_(autocastPrecision(parts.execution.precision)) {
  configureKernels(parts.execution);
  // The plan is checked before this rank connects to any other: a bad
  // combination exits 2 on every rank with nothing in flight between them.
  plan_ = planParallelism(parts.parallel, static_cast<int>(envInt("WORLD_SIZE", 1, 1 << 20).value_or(1)),
                          parts.planned_model);
  std::string unsharded;
  if (plan_.shard != ShardStage::kNone && plan_.dp_shard == 1) {
    // Over one rank ZeRO splits nothing; it would only keep a second copy.
    unsharded = std::string("--shard ") + shardStageName(plan_.shard) +
                " over 1 data-parallel rank shards nothing; running as --shard none";
    plan_.shard = ShardStage::kNone;
    plan_.reduce_dtype = ReduceDtype::kFp32;
  }
  checkFp8(parts);
  InitOptions init_options;
  init_options.backend = commBackendName(parts.parallel.backend);  // the library API takes the word
  init_options.collective_timeout = std::chrono::seconds(parts.parallel.timeout_s);
  ctx_ = init(init_options);
  if (!unsharded.empty() && ctx_->rank() == 0) DTRAIN_LOG_WARN(unsharded);
  shareCores(*ctx_);
  if (precision_ == Precision::kFp8) {
    // Every rank has the same kind of device: all of them exit 2 here.
    const std::string why = models::fp8RecipeUnsupported(parts.execution.fp8_recipe, ctx_->device());
    if (!why.empty()) throw ConfigError("--precision fp8: " + why + "; use --precision bf16");
  }
  stream_ = std::make_unique<JobStreamGuard>(ctx_->device());  // a capturable stream for the whole job
  if (parts.preflight) parts.preflight(*ctx_, deviceName());
  if (ctx_->size() != plan_.worldSize()) {
    throw ConfigError("the group has " + std::to_string(ctx_->size()) + " ranks but WORLD_SIZE planned " +
                      std::to_string(plan_.worldSize()) + "; expected the launcher's WORLD_SIZE");
  }
  const bool hybrid = plan_.dp_replicate > 1 && plan_.shard != ShardStage::kNone;
  ParallelizeOptions parallelize_options = parallelizeOptions(parts, ctx_, precision_);
  dp_comm_ = ctx_->communicator();
  std::shared_ptr<Communicator> shard_comm = dp_comm_;  // what --shard shards over
  if (plan_.tp > 1 || plan_.dp_replicate > 1 || plan_.pp > 1) {
    mesh_ = std::make_unique<DeviceMesh>(meshShapeOf(plan_), ctx_->world(), meshOptions(*ctx_, "train/mesh"));
    dp_comm_ = mesh_->flatten({"dp_replicate", "dp_shard"});
    // Hybrid sharding: the stage shards within dp_shard; the replicas' sum follows backward.
    shard_comm = hybrid ? mesh_->communicator("dp_shard") : dp_comm_;
    if (ctx_->device().is_cuda()) {
      std::shared_ptr<Context> ctx = ctx_;
      parallelize_options.gather_communicator = [this, ctx, hybrid]() -> std::shared_ptr<Communicator> {
        gather_mesh_ = std::make_unique<DeviceMesh>(meshShapeOf(plan_), ctx->world(), meshOptions(*ctx, "train/gather"));
        return hybrid ? gather_mesh_->communicator("dp_shard") : gather_mesh_->flatten({"dp_replicate", "dp_shard"});
      };
    }
  }
  torch::manual_seed(parts.seed);
  model_ = make_model();
  // Frozen parameters (a LoRA run's base) only ever meet autocast's matmuls: bf16 halves them.
  if (precision_ == Precision::kBf16) keepFrozenParametersIn(*model_, torch::kBFloat16);
  // Split on the CPU, before the device holds the whole model: tp's parts, then the pipeline's stages.
  if (plan_.tp > 1) splitTensors();
  if (plan_.pp > 1) model_ = cutPipeline();
  if (parts.channels_last) useChannelsLast(*model_);
  model_->to(ctx_->device());

  parallel_ = parallelize(model_, plan_, shard_comm, parallelize_options);
  GradScalerOptions scaler_options;
  scaler_options.enabled = precision_ == Precision::kFp16;
  scaler_ = std::make_unique<GradScaler>(scaler_options);
  if (scaler_options.enabled && (parallel_.data_parallel->shardsGradients() || plan_.tp > 1)) {
    // Each rank checks only its shard: a step is skipped when any rank saw inf/nan.
    std::shared_ptr<Communicator> comm = ctx_->communicator();  // every rank: tp ranks hold other gradients
    const std::chrono::milliseconds timeout = ctx_->collectiveTimeout();
    scaler_->setFoundInfReduction([comm, timeout](torch::Tensor& found_inf) {
      AllreduceOptions options;
      options.op = ReduceOp::kMax;
      options.timeout = timeout;
      void* stream = currentStreamOf(found_inf);
      comm->allreduce(bufferOf(found_inf, stream), bufferOf(found_inf, stream), options)->wait(timeout);
    });
  }

  makeStep(parts, hybrid);
}

void TrainingJob::makeStep(const JobParts& parts, bool hybrid) {
  TrainStepOptions step_options;
  step_options.cuda_graphs = parts.execution.cuda_graphs;
  step_options.warmup_steps = parts.execution.graph_warmup;
  step_options.precision = precision_;
  step_options.clip_grad_norm = parts.optimizer.clip_grad_norm;
  step_options.communicator_capturable = ctx_->backend() == "nccl";
  step_options.collective_timeout = ctx_->collectiveTimeout();
  if (tp_model_ || pipeline_) {
    step_options.parameter_copies = parameterCopies(tp_model_.get(), pipeline_.get(), *parallel_.data_parallel);
    // Sharded gradients: every shard of every tp part and stage (one replica's ranks).
    step_options.norm_communicator = !parallel_.data_parallel->shardsGradients() ? mesh_->flatten({"pp", "tp"})
                                     : hybrid ? mesh_->flatten({"pp", "dp_shard", "tp"})
                                              : ctx_->communicator();
  }
  if (pipeline_) {
    PipelineModel* pipeline = pipeline_.get();
    DataParallel* dp = parallel_.data_parallel.get();
    step_options.forward_backward = [pipeline, dp](const torch::Tensor& inputs, const torch::Tensor& targets,
                                                   const std::function<void(const char*)>& phase) {
      return pipeline->forwardBackward(inputs, targets, dp, phase);
    };
    step_options.graphs_unsupported = "a pipeline's stages wait on their neighbours' transfers, which a graph of "
                                      "one rank's step cannot hold";
  }
  if (hybrid) step_options.replica_communicator = mesh_->communicator("dp_replicate");
  step_ = std::make_unique<TrainStep>(*model_, *parallel_.data_parallel, *parallel_.optimizer, *scaler_,
                                      ctx_->device(), step_options);
}

void TrainingJob::splitTensors() {
  auto lm = std::dynamic_pointer_cast<models::LanguageModel>(model_);
  if (!lm) throw ConfigError("--tp " + std::to_string(plan_.tp) + ": the model is not a transformer language model");
  TensorParallelOptions tp_options;
  tp_options.sequence_parallel = plan_.sequence_parallel;
  tp_options.overlap_chunks = plan_.tp_overlap;
  tp_model_ = std::make_unique<TensorParallelModel>(
      lm, TensorParallelGroup::create(mesh_->communicator("tp"), ctx_->collectiveTimeout()), tp_options);
}

std::shared_ptr<models::Model> TrainingJob::cutPipeline() {
  auto lm = std::dynamic_pointer_cast<models::LanguageModel>(model_);
  if (!lm) throw ConfigError("--pp " + std::to_string(plan_.pp) + ": the model is not a transformer language model");
  if (precision_ == Precision::kFp16) {
    throw ConfigError("--pp with --precision fp16: the loss scaler decides on one rank's gradients; use bf16");
  }
  PipelineModelOptions o;
  o.schedule = buildPipelineSchedule(plan_.pp_schedule, plan_.pp, plan_.microbatches, plan_.virtual_stages);
  o.stages = plan_.stages;
  o.rank = mesh_->coordinate("pp");
  DeviceMesh* mesh = mesh_.get();
  o.channel = [mesh](int from, int to, const std::string& kind) { return mesh->pair("pp", from, to, kind); };
  o.group = mesh_->communicator("pp");
  o.precision = precision_;
  o.sequence_divisor = plan_.sequence_parallel ? plan_.tp : 1;
  o.timeout = ctx_->collectiveTimeout();
  pipeline_ = std::make_shared<PipelineModel>(lm, std::move(o));
  return pipeline_;
}

torch::Tensor TrainingJob::lossSum() {
  torch::Tensor sum = step_->lossSum().clone();
  if (!pipeline_) return sum;
  BroadcastOptions options;
  options.root = plan_.pp - 1;  // the last stage's rank of this pipeline
  options.timeout = ctx_->collectiveTimeout();
  auto work = mesh_->communicator("pp")->broadcast(bufferOf(sum, currentStreamOf(sum)), options);
  if (!sum.is_cuda()) work->wait(ctx_->collectiveTimeout());
  return sum;
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
  const DataParallel& dp = *parallel_.data_parallel;
  for (size_t b = 0; b < dp.buckets().size(); ++b) bytes += dp.bucketBytes(static_cast<int>(b));
  return bytes;
}

}  // namespace dtrain
