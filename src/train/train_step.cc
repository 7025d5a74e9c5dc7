#include "train/train_step.h"

#include "comm/communicator.h"
#include "common/error.h"
#include "common/log.h"
#include "models/fp8_linear.h"
#include "parallel/tensor_buffer.h"

#if DTRAIN_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "gpu/cuda_check.h"
#include "libtorch/compat.h"
#endif

namespace dtrain {

std::string cudaGraphsUnsupportedReason(torch::Device device, Precision precision, bool communicator_capturable) {
#if !DTRAIN_TORCH_CUDA
  (void)device, (void)precision, (void)communicator_capturable;
  return "this build of dtrain has no CUDA support";
#else
  if (!device.is_cuda()) return "CUDA graphs need a CUDA device (training runs on " + device.str() + ")";
  if (precision == Precision::kFp16) {
    return "fp16 loss scaling decides on the host whether a step is skipped; use bf16 or fp32 with CUDA graphs";
  }
  if (!communicator_capturable) return "the communicator cannot be captured into a CUDA graph (use NCCL)";
  return "";
#endif
}

struct TrainStep::Graph {
#if DTRAIN_TORCH_CUDA
  at::cuda::CUDAGraph graph;
#endif
  StepBatch batch;  // static inputs the graph reads
};

JobStreamGuard::JobStreamGuard(torch::Device device) {
#if DTRAIN_TORCH_CUDA
  if (device.is_cuda()) {
    guard_ = std::make_shared<c10::cuda::CUDAStreamGuard>(
        c10::cuda::getStreamFromPool(/*isHighPriority=*/false, static_cast<c10::DeviceIndex>(device.index())));
  }
#else
  (void)device;
#endif
}

JobStreamGuard::~JobStreamGuard() = default;

TrainStep::TrainStep(models::Model& model, DataParallel& dp, Optimizer& optimizer, GradScaler& scaler,
                     torch::Device device, TrainStepOptions options)
    : model_(model),
      dp_(dp),
      optimizer_(optimizer),
      scaler_(scaler),
      device_(device),
      options_(options),
      loss_sum_(torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device))) {
  if (options_.accumulation < 1) {
    throw ConfigError("TrainStep: accumulation must be >= 1 micro-batch per step, got " +
                      std::to_string(options_.accumulation));
  }
  if (options_.warmup_steps < 1) {
    throw ConfigError("TrainStep: warmup_steps must be >= 1 (cuDNN and NCCL settle before a capture), got " +
                      std::to_string(options_.warmup_steps));
  }
  if (options_.cuda_graphs) {
    fallback_ = cudaGraphsUnsupportedReason(device, options_.precision, options_.communicator_capturable);
    if (fallback_.empty()) fallback_ = options_.graphs_unsupported;
  }
  if (options_.precision == Precision::kFp8) trackWeightMaxima();
}

TrainStep::~TrainStep() = default;

// FP8: the optimizer's fused step keeps every 2-D parameter's absolute
// maximum as it writes it, so that the next forward casts each weight to
// FP8 in one pass over its float32 values instead of two. Where the
// optimizer holds whole slabs (replicated data parallelism, tensor and
// pipeline parts); a ZeRO stage's optimizer holds slices and cannot.
void TrainStep::trackWeightMaxima() {
  if (!device_.is_cuda() || dp_.shardsGradients() || optimizer_.slabs().size() != dp_.slabs().size()) return;
  const std::vector<torch::Tensor>& params = dp_.parameters();
  for (size_t s = 0; s < optimizer_.slabs().size(); ++s) {
    if (!optimizer_.slabs()[s].param.is_same(dp_.slabs()[s].param)) return;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    std::vector<torch::Tensor> weights;
    for (const ParameterRun& run : dp_.slabRuns(static_cast<int>(s), 0, dp_.paddedSlabNumel(s))) {
      const torch::Tensor& p = params[static_cast<size_t>(run.param)];
      if (p.dim() != 2 || run.offset != 0 || run.numel != p.numel()) continue;
      ranges.emplace_back(run.position, run.position + run.numel);
      weights.push_back(p);
    }
    if (ranges.empty()) continue;
    const torch::Tensor maxima = optimizer_.trackAbsoluteMaxima(static_cast<int>(s), ranges);
    if (!maxima.defined()) continue;
    for (size_t k = 0; k < weights.size(); ++k) {
      weight_maxima_.emplace_back(weights[k], maxima.narrow(0, static_cast<int64_t>(k), 1));
    }
  }
}

void TrainStep::setAccumulation(int64_t micro_batches) {
  if (micro_batches < 1) {
    throw ConfigError("TrainStep: accumulation must be >= 1 micro-batch per step, got " +
                      std::to_string(micro_batches));
  }
  if (eager_steps_ + graphed_steps_ > 0) throw ConfigError("TrainStep: accumulation is set before the first step");
  if (options_.forward_backward && micro_batches > 1) {
    throw ConfigError("--tokens-per-step asks for " + std::to_string(micro_batches) +
                      " micro-batches per step, which a pipeline splits by --microbatches instead; drop "
                      "--tokens-per-step or make --batch-size the step's rows");
  }
  options_.accumulation = micro_batches;
}

std::string TrainStep::graphStatus() const {
  if (!options_.cuda_graphs) return "";
  if (!fallback_.empty()) return "eager (" + fallback_ + ")";
  if (graphs_.empty()) return "warming up";
  return "captured " + std::to_string(graphs_.size()) + " graph(s)";
}

torch::Tensor TrainStep::modelLoss(const torch::Tensor& inputs, const torch::Tensor& targets,
                                   const torch::Tensor& positions) {
  AutocastGuard autocast(device_, options_.precision);
  return positions.defined() ? model_.packedLoss(inputs, targets, positions) : model_.loss(inputs, targets);
}

torch::Tensor TrainStep::forwardBackward(const StepBatch& batch) {
  const int64_t parts = options_.accumulation;
  const torch::Tensor& inputs = batch.inputs;
  const torch::Tensor& targets = batch.targets;
  if (options_.forward_backward) {  // the schedule interleaves forwards and backwards and names them
    if (batch.positions.defined()) throw ConfigError("packed samples cannot run through a pipeline's schedule");
    return options_.forward_backward(inputs, targets, [this](const char* phase) { mark(phase); });
  }
  if (parts == 1) {
    mark("forward");
    const torch::Tensor loss = modelLoss(inputs, targets, batch.positions);
    mark("backward");
    scaler_.scale(loss).backward();
    return loss.detach();
  }
  const int64_t rows = inputs.size(0);
  if (rows % parts != 0) {
    throw ConfigError("a batch of " + std::to_string(rows) + " rows cannot be split into " + std::to_string(parts) +
                      " equal micro-batches");
  }
  const std::vector<torch::Tensor> input_parts = inputs.chunk(parts);
  const std::vector<torch::Tensor> target_parts = targets.chunk(parts);
  const std::vector<torch::Tensor> position_parts =
      batch.positions.defined() ? batch.positions.chunk(parts) : std::vector<torch::Tensor>(parts);
  torch::Tensor loss_sum;
  for (int64_t k = 0; k < parts; ++k) {
    mark("forward");
    const torch::Tensor loss =
        modelLoss(input_parts[k], target_parts[k], position_parts[k]) / static_cast<double>(parts);
    mark("backward");
    if (k + 1 < parts) {
      auto no_sync = dp_.noSync();
      scaler_.scale(loss).backward();
    } else {
      scaler_.scale(loss).backward();
    }
    loss_sum = loss_sum.defined() ? loss_sum + loss.detach() : loss.detach();
  }
  return loss_sum;
}

void TrainStep::body(const StepBatch& batch) {
  // The optimizer's gradients are DataParallel's: its slabs (replicated,
  // ZeRO-1) or its shards. Lazily zeroed: backward writes the first ones.
  dp_.zeroGrad(/*set_to_none=*/true);
  const torch::Tensor loss = forwardBackward(batch);
  if (options_.replica_communicator) reduceAcrossReplicas();
  mark("optimizer");
  if (options_.clip_grad_norm > 0) clipGradients();
  scaler_.step(optimizer_);
  if (!weight_maxima_.empty() && optimizer_.absoluteMaximaCurrent()) {
    for (const auto& [weight, maxima] : weight_maxima_) models::noteAbsoluteMaximum(weight, maxima);
  }
  torch::NoGradGuard no_grad;
  loss_sum_.add_(loss);
  mark("end");
}

// Unscales and clips what this rank holds: the full gradients, or (ZeRO-2)
// its shard, by the norm over every rank's shard.
void TrainStep::clipGradients() {
  if (options_.norm_communicator) {
    const std::vector<FlatSlab>& held = dp_.shardsGradients() ? dp_.shards() : dp_.slabs();
    scaler_.unscale(held);
    clipTensorParallel(held);
    return;
  }
  if (dp_.shardsGradients()) {
    scaler_.unscale(dp_.shards());
    clipGradNormOnDevice(dp_.shards(), options_.clip_grad_norm, *dp_.communicator(), options_.collective_timeout);
    return;
  }
  scaler_.unscale(dp_.slabs());
  clipGradNormOnDevice(dp_.slabs(), options_.clip_grad_norm);
}

// One all-reduce per held gradient tensor, stream-ordered on CUDA (so it
// is captured with the step), waited for on the CPU.
void TrainStep::reduceAcrossReplicas() {
  torch::NoGradGuard no_grad;
  Communicator& comm = *options_.replica_communicator;
  const std::vector<FlatSlab>& held = dp_.shardsGradients() ? dp_.shards() : dp_.slabs();
  AllreduceOptions options;
  options.op = ReduceOp::kSum;
  options.timeout = options_.collective_timeout;
  const double scale = 1.0 / comm.size();
  for (const FlatSlab& slab : held) {
    torch::Tensor grad = slab.grad;
    if (!grad.defined() || grad.numel() == 0) continue;
    void* stream = currentStreamOf(grad);
    auto work = comm.allreduce(bufferOf(grad, stream), bufferOf(grad, stream), options);
    if (!grad.is_cuda()) work->wait(options_.collective_timeout);
    grad.mul_(scale);
  }
}

// The squares of what this rank holds, less (1 - 1/copies) of those of
// the gradients other tp ranks hold copies of, summed over the norm's
// group: each element of the whole model's gradient counted once.
void TrainStep::clipTensorParallel(const std::vector<FlatSlab>& held) {
  torch::NoGradGuard no_grad;
  if (!copies_found_) {
    copies_found_ = true;
    const auto add = [&](const torch::Tensor& grad, int slab, int64_t begin, int64_t numel) {
      for (const ParameterRun& run : dp_.slabRuns(slab, begin, numel)) {
        auto it = options_.parameter_copies.find(run.param);
        if (it == options_.parameter_copies.end() || it->second <= 1) continue;
        copied_grads_.emplace_back(grad.narrow(0, run.position, run.numel), 1.0 - 1.0 / it->second);
      }
    };
    if (dp_.shardsGradients()) {
      const ShardLayout layout = dp_.shardLayout();
      const int64_t ranks = dp_.communicator()->size(), rank = dp_.communicator()->rank();
      for (size_t k = 0; k < layout.pieces.size(); ++k) {
        const ShardPiece& piece = layout.pieces[k];
        const int64_t slice = piece.numel / ranks;
        add(held[k].grad, piece.slab, piece.offset + rank * slice, slice);
      }
    } else {
      for (size_t s = 0; s < held.size(); ++s) add(held[s].grad, static_cast<int>(s), 0, held[s].grad.numel());
    }
  }
  torch::Tensor squares = gradSquaredNorm(held).to(torch::kFloat).reshape({1}).contiguous();
  for (const auto& [grad, weight] : copied_grads_) squares.sub_(grad.to(torch::kFloat).square().sum() * weight);
  AllreduceOptions options;
  options.op = ReduceOp::kSum;
  options.timeout = options_.collective_timeout;
  void* stream = currentStreamOf(squares);
  auto work = options_.norm_communicator->allreduce(bufferOf(squares, stream), bufferOf(squares, stream), options);
  if (!squares.is_cuda()) work->wait(options_.collective_timeout);
  clipGradsWithNorm(held, squares.clamp_min(0).sqrt().reshape({}), options_.clip_grad_norm);
}

void TrainStep::eager(const StepBatch& batch) {
  body(batch);
  if (optimizer_.capturable()) {
    optimizer_.countStep();
  } else if (device_.is_cuda() && !scaler_.enabled()) {
    // From the second step on, a CUDA job updates with the device-side lr
    // whether it replays graphs or not, so eager and graphed training do
    // the same arithmetic (and the lr costs no host-to-device copy).
    optimizer_.setCapturable(true);
  }
  ++eager_steps_;
}

void TrainStep::run(const StepBatch& batch) {
  last_graphed_ = false;
  if (!options_.cuda_graphs || !fallback_.empty()) {
    eager(batch);
    return;
  }
  const int64_t key = batch.inputs.size(0) * 2 + (batch.positions.defined() ? 1 : 0);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    if (seen_[key] < options_.warmup_steps || !capture(key, batch)) {
      ++seen_[key];
      eager(batch);
      return;
    }
    it = graphs_.find(key);
  }
  replay(*it->second, batch);
}

void TrainStep::replay(Graph& graph, const StepBatch& batch) {
#if DTRAIN_TORCH_CUDA
  mark("step (CUDA graph replay)");
  graph.batch.inputs.copy_(batch.inputs, /*non_blocking=*/true);
  graph.batch.targets.copy_(batch.targets, /*non_blocking=*/true);
  if (batch.positions.defined()) graph.batch.positions.copy_(batch.positions, /*non_blocking=*/true);
  graph.graph.replay();
  mark("end");
  last_graphed_ = true;
  optimizer_.countStep();
  ++graphed_steps_;
#else
  (void)graph, (void)batch;
#endif
}

// Captures one step of `batch` samples; the step itself is not run (the
// caller replays the graph). False, with fallback_ set, when capture failed.
bool TrainStep::capture(int64_t key, const StepBatch& batch) {
#if !DTRAIN_TORCH_CUDA
  (void)key, (void)batch;
  fallback_ = "this build of dtrain has no CUDA support";
  return false;
#else
  const c10::cuda::CUDAStream stream =
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_.index()));
  if (stream == c10::cuda::getDefaultCUDAStream(static_cast<c10::DeviceIndex>(device_.index()))) {
    fallback_ = "the step runs on the default CUDA stream, which cannot be captured (build the model and "
                "DataParallel and train under a JobStreamGuard)";
    DTRAIN_LOG_WARN("CUDA graphs off, training goes on eagerly: " << fallback_);
    return false;
  }
  // Every outstanding kernel and collective finishes first, so nothing but
  // this step runs while the stream is being captured.
  DTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
  auto g = std::make_unique<Graph>();
  g->batch.inputs = batch.inputs.clone();
  g->batch.targets = batch.targets.clone();
  if (batch.positions.defined()) g->batch.positions = batch.positions.clone();
  GradSyncObserver* const observer = dp_.observer();
  dp_.setObserver(nullptr);
  const bool captured = captureInto(*g);
  dp_.setObserver(observer);
  if (!captured) return false;
  DTRAIN_LOG_DEBUG("captured the training step for batch " << batch.inputs.size(0)
                                                         << (batch.positions.defined() ? " (packed samples)" : ""));
  graphs_[key] = std::move(g);
  return true;
#endif
}

bool TrainStep::captureInto(Graph& g) {
#if !DTRAIN_TORCH_CUDA
  (void)g;
  return false;
#else
  const bool was_capturable = optimizer_.capturable();
  try {
    optimizer_.setCapturable(true);
    compat::beginGraphCapture(g.graph);
    capturing_ = true;
    try {
      body(g.batch);
      capturing_ = false;
    } catch (...) {
      capturing_ = false;
      try {
        g.graph.capture_end();
      } catch (...) {
      }
      throw;
    }
    g.graph.capture_end();
    return true;
  } catch (const std::exception& e) {
    (void)cudaGetLastError();  // a failed capture leaves a non-sticky error behind
    if (!was_capturable) optimizer_.setCapturable(false);
    fallback_ = std::string("capture failed: ") + e.what();
    const auto newline = fallback_.find('\n');
    if (newline != std::string::npos) fallback_.resize(newline);
    DTRAIN_LOG_WARN("CUDA graphs off, training goes on eagerly: " << fallback_);
    return false;
  }
#endif
}

Precision autocastPrecision(ComputePrecision precision) {
  switch (precision) {
    case ComputePrecision::kFp32: return Precision::kFp32;
    case ComputePrecision::kBf16: return Precision::kBf16;
    case ComputePrecision::kFp16: return Precision::kFp16;
    case ComputePrecision::kFp8: return Precision::kFp8;
  }
  return Precision::kFp32;
}

}  // namespace dtrain
