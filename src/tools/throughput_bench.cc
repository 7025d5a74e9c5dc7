#include "tools/throughput_bench.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "gpu/gpu_peak.h"
#include "gpu/mfu.h"
#include "models/lm_counts.h"
#include "train/device_memory_stats.h"
#include "plan/memory_estimate.h"
#include "models/language_model.h"
#include "train/bucket_timer.h"
#include "train/train_memory.h"
#include "train/training_job.h"

#if DTRAIN_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include "gpu/cuda_check.h"
#if DTRAIN_HAVE_NCCL
#include <nccl.h>
#endif
#endif

namespace dtrain {
namespace {

using Clock = std::chrono::steady_clock;

void synchronize(const torch::Device& device) {
#if DTRAIN_TORCH_CUDA
  if (device.is_cuda()) DTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
#else
  (void)device;
#endif
}

nlohmann::json versions(const torch::Device& device) {
  nlohmann::json v;
  v["torch"] = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
               std::to_string(TORCH_VERSION_PATCH);
#if DTRAIN_TORCH_CUDA
  if (device.is_cuda()) {
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device.index());
    v["device"] = prop.name;
    v["cuda_runtime"] = std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10);
    v["cuda_driver_api"] = std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
#if DTRAIN_HAVE_NCCL
    int nccl = 0;
    ncclGetVersion(&nccl);
    v["nccl"] = std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) + "." +
                std::to_string(nccl % 100);
#endif
  }
#else
  (void)device;
#endif
  return v;
}

#if DTRAIN_TORCH_CUDA
// Device time of each phase of the observed eager steps, from CUDA events
// recorded at the step's phase marks.
class PhaseTimer : public StepObserver {
 public:
  explicit PhaseTimer(torch::Device device) : device_(device) {}
  void phase(const char* name) override {
    auto event = std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault);
    event->record(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_.index())));
    marks_.emplace_back(name, std::move(event));
  }
  // Adds the last step's phases to the totals and forgets its marks.
  void collect() {
    if (!marks_.empty()) marks_.back().second->synchronize();
    for (size_t i = 0; i + 1 < marks_.size(); ++i) {
      totals_ms_[marks_[i].first] += marks_[i].second->elapsed_time(*marks_[i + 1].second);
    }
    marks_.clear();
  }
  double total(const std::string& phase) const {
    auto it = totals_ms_.find(phase);
    return it == totals_ms_.end() ? 0 : it->second;
  }

 private:
  torch::Device device_;
  std::vector<std::pair<std::string, std::shared_ptr<at::cuda::CUDAEvent>>> marks_;
  std::map<std::string, double> totals_ms_;
};

// Device time of the transformer operations of the observed forward passes
// (models::ops), by kind, from CUDA events around each.
class OpTimer : public models::ops::OpObserver {
 public:
  void opStarted(models::ops::OpKind kind, const torch::Tensor& on) override { open_ = {kind, record(on)}; }
  void opEnded(models::ops::OpKind kind, const torch::Tensor& on) override {
    spans_.push_back({kind, open_.second, record(on)});
  }
  // Adds the last step's operations to the totals.
  void collect() {
    if (!spans_.empty()) spans_.back().end->synchronize();
    for (const Span& span : spans_) totals_ms_[static_cast<int>(span.kind)] += span.start->elapsed_time(*span.end);
    spans_.clear();
  }
  double total(models::ops::OpKind kind) const { return totals_ms_[static_cast<int>(kind)]; }

 private:
  struct Span {
    models::ops::OpKind kind;
    std::shared_ptr<at::cuda::CUDAEvent> start, end;
  };
  static std::shared_ptr<at::cuda::CUDAEvent> record(const torch::Tensor& on) {
    auto event = std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault);
    if (on.is_cuda()) event->record(c10::cuda::getCurrentCUDAStream(on.device().index()));
    return event;
  }
  std::pair<models::ops::OpKind, std::shared_ptr<at::cuda::CUDAEvent>> open_;
  std::vector<Span> spans_;
  double totals_ms_[models::ops::kOpKinds] = {};
};

// Where an eager step's GPU time goes: forward, backward (which ends when
// the last bucket's all-reduce joined the compute stream) and optimizer,
// plus the buckets' own all-reduce times and the part of them not hidden
// behind backward.
nlohmann::json timeSplit(TrainingJob& job, const torch::Tensor& inputs, const torch::Tensor& targets,
                         double step_ms) {
  constexpr int kSteps = 10;
  PhaseTimer phases(job.device());
  BucketTimer buckets(job.dataParallel());
  OpTimer ops;
  job.step().setObserver(&phases);
  job.dataParallel().setObserver(&buckets);
  models::ops::setOpObserver(&ops);
  TensorParallelGroup* tp_group = job.tensorParallel() != nullptr ? &job.tensorParallel()->group() : nullptr;
  if (tp_group != nullptr) tp_group->startTiming();
  if (job.pipeline() != nullptr) job.pipeline()->startTiming();
  double allreduce_ms = 0, exposed_ms = 0;
  for (int i = 0; i < kSteps; ++i) {
    job.step().run(inputs, targets);
    phases.collect();
    ops.collect();
    const BackwardTimeline timeline = buckets.last();
    double last_end = 0;
    for (const auto& b : timeline.buckets) {
      allreduce_ms += b.end_ms - b.start_ms;
      last_end = std::max(last_end, b.end_ms);
    }
    exposed_ms += std::max(0.0, last_end - timeline.backward_end_ms);
  }
  job.step().setObserver(nullptr);
  job.dataParallel().setObserver(nullptr);
  models::ops::setOpObserver(nullptr);
  nlohmann::json split;
  split["forward_ms"] = phases.total("forward") / kSteps;
  // Inside forward, for language models: the transformer operations by
  // kind, and the rest (the attention and MLP projections, embeddings,
  // residual adds, casts).
  double in_ops = 0;
  for (int k = 0; k < models::ops::kOpKinds; ++k) {
    const auto kind = static_cast<models::ops::OpKind>(k);
    if (ops.total(kind) == 0) continue;
    split["forward_split_ms"][models::ops::opKindName(kind)] = ops.total(kind) / kSteps;
    in_ops += ops.total(kind);
  }
  if (in_ops > 0) split["forward_split_ms"]["other"] = std::max(0.0, phases.total("forward") - in_ops) / kSteps;
  split["backward_ms"] = phases.total("backward") / kSteps;
  split["allreduce_ms"] = allreduce_ms / kSteps;
  split["allreduce_exposed_ms"] = exposed_ms / kSteps;
  split["optimizer_ms"] = phases.total("optimizer") / kSteps;
  if (tp_group != nullptr) {
    // Inside forward and backward: the tensor-parallel collectives, and the
    // share of them the products' stream stood waiting for.
    const TensorParallelCommTime tp = tp_group->takeTiming();
    split["tp_comm_ms"] = tp.total_ms / kSteps;
    split["tp_comm_exposed_ms"] = tp.exposed_ms / kSteps;
    split["tp_collectives"] = tp.collectives / kSteps;
  }
  if (PipelineModel* pipeline = job.pipeline()) {
    // The forwards and backwards of the schedule: this rank's span of them,
    // the time its actions computed, and the bubble (idle over span), this
    // rank's and the mean over every rank.
    const PipelineModel::Timing t = pipeline->takeTiming();
    std::vector<double> mean{t.bubble()};
    job.context().allreduceSum(mean);
    const ParallelPlan& p = job.plan();
    split["pp_span_ms"] = t.span_ms / kSteps;
    split["pp_busy_ms"] = t.busy_ms / kSteps;
    split["pp_forward_ms"] = t.forward_ms / kSteps;
    split["pp_bubble"] = t.bubble();
    split["pp_bubble_mean"] = mean[0] / job.context().size();
    split["pp_bubble_theory"] = theoreticalPipelineBubble(p.pp, p.microbatches, p.virtual_stages);
  }
  const double busy = (phases.total("forward") + phases.total("backward") + phases.total("optimizer")) / kSteps;
  split["gpu_busy_ms"] = busy;
  split["idle_ms"] = std::max(0.0, step_ms - busy);
  return split;
}
#endif

// Language models train with the GPT recipe's AdamW (betas 0.9/0.95, weight
// decay 0.1 off norms, biases and embeddings); image models with SGD.
OptimizerOptions benchOptimizer(const BenchTrainOptions& o) {
  OptimizerOptions opt;
  if (isLanguageModel(o.model)) {
    opt.kind = OptimizerKind::kAdamW;
    opt.lr = 6e-4;
    opt.beta2 = 0.95;
    opt.weight_decay = 0.1;
  } else {
    opt.kind = OptimizerKind::kSgd;
    opt.lr = 0.1;
    opt.momentum = 0.9;
    opt.weight_decay = 5e-4;
  }
  opt.clip_grad_norm = o.clip_grad_norm;
  return opt;
}

ModelFactory benchModel(const BenchTrainOptions& o) {
  if (isLanguageModel(o.model)) {
    const models::LanguageModelConfig config = languageModelConfig(o.model);
    const bool checkpointing = o.model.lm.activation_checkpointing;
    return [config, checkpointing] {
      std::shared_ptr<models::LanguageModel> model = models::createLanguageModel(config);
      model->setActivationCheckpointing(checkpointing);
      return model;
    };
  }
  return [&o] {
    models::ModelOptions m;
    m.in_channels = o.input.channels;
    m.num_classes = o.input.classes;
    m.image_size = o.input.image_size;
    m.stem = stemName(o.model.stem);  // models::ModelOptions takes the word
    return models::createModel(o.model.name, m);
  };
}

// One fixed synthetic batch per rank, resident on the device: random tokens
// for a language model, random images and labels otherwise.
struct BenchBatch {
  torch::Tensor inputs, targets;
  int64_t tokens_per_sample = 0;
};

BenchBatch benchBatch(const BenchTrainOptions& o, torch::Device device) {
  const SyntheticBatchOptions& in = o.input;
  const auto longs = torch::TensorOptions().dtype(torch::kLong).device(device);
  BenchBatch b;
  if (isLanguageModel(o.model)) {
    const models::LanguageModelConfig config = languageModelConfig(o.model);
    b.inputs = torch::randint(config.vocab_size, {in.batch_size, config.seq_len}, longs);
    b.targets = torch::randint(config.vocab_size, {in.batch_size, config.seq_len}, longs);
    b.tokens_per_sample = config.seq_len;
    return b;
  }
  b.inputs = torch::randn({in.batch_size, in.channels, in.image_size, in.image_size},
                          torch::TensorOptions().device(device));
  if (o.model.channels_last) b.inputs = b.inputs.contiguous(at::MemoryFormat::ChannelsLast);
  b.targets = torch::randint(in.classes, {in.batch_size}, longs);
  return b;
}

void writeResult(const nlohmann::json& result, const std::string& path) {
  if (path.empty()) {
    std::cout << result.dump() << std::endl;
    return;
  }
  std::ofstream out(path);
  out << result.dump() << "\n";
  if (!out) throw IoError("cannot write the bench result to " + path);
}

// A language model's memory needs per GPU (nullopt for image models), as
// `dtrain train` and `dtrain plan` size the same job.
std::optional<MemoryInputs> benchMemoryInputs(const BenchTrainOptions& o, const models::LanguageModelConfig& config,
                                              const OptimizerOptions& optimizer, int ranks, bool cuda) {
  if (!isLanguageModel(o.model)) return std::nullopt;
  return lmMemoryInputs(o.model, o.parallel, o.execution, optimizer, o.input.batch_size, config, ranks, cuda);
}

// The result's fields that say how the ranks were laid out.
nlohmann::json meshFields(const ParallelPlan& p) {
  nlohmann::json fields = {{"tp", p.tp},
                           {"dp_replicate", p.dp_replicate},
                           {"dp_shard", p.dp_shard},
                           {"sequence_parallel", p.sequence_parallel},
                           {"shard", shardStageName(p.shard)},
                           {"pp", p.pp}};
  if (p.pp > 1) {
    fields.update({{"microbatches", p.microbatches}, {"pp_schedule", pipelineScheduleName(p.pp_schedule)},
                   {"virtual_stages", p.virtual_stages}, {"pp_stages", formatPipelineStages(p.stages)}});
  }
  return fields;
}

// Seconds of `steps` steps, the device synchronised after them; with
// profile_range on a CUDA device, inside cudaProfilerStart/Stop.
double timedSteps(TrainStep& step, const torch::Tensor& inputs, const torch::Tensor& targets, int64_t steps,
                  const torch::Device& device, bool profile_range) {
  profile_range = profile_range && device.is_cuda();
#if DTRAIN_TORCH_CUDA
  if (profile_range) DTRAIN_CUDA_CHECK(cudaProfilerStart());
#endif
  const auto start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) step.run(inputs, targets);
  synchronize(device);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
#if DTRAIN_TORCH_CUDA
  if (profile_range) DTRAIN_CUDA_CHECK(cudaProfilerStop());
#endif
  return seconds;
}

}  // namespace

int runThroughputBench(const BenchTrainOptions& o) {
  checkBenchTrainOptions(o, torch::cuda::is_available());  // a CPU run captures no CUDA graph
  const OptimizerOptions optimizer = benchOptimizer(o);
  const models::LanguageModelConfig lm = isLanguageModel(o.model) ? languageModelConfig(o.model)
                                                                  : models::LanguageModelConfig{};
  JobParts parts{o.parallel, o.execution, optimizer, o.model.channels_last, /*seed=*/1234, {}, plannedModel(o.model)};
  parts.preflight = [&](Context& ctx, const std::string& device_name) {
    const int64_t limit = plannedDeviceBytes(ctx.device());
    if (limit <= 0) return;
    if (auto in = benchMemoryInputs(o, lm, optimizer, ctx.size(), ctx.device().is_cuda())) {
      checkFits(*in, limit, plannedMemoryName(ctx.device(), device_name));
    }
  };
  TrainingJob job(parts, benchModel(o));
  Context& ctx = job.context();
  const torch::Device device = job.device();
  job.model().train();
  const BenchBatch batch = benchBatch(o, device);
  const torch::Tensor& inputs = batch.inputs;
  const torch::Tensor& targets = batch.targets;

  TrainStep& step = job.step();
  // The peak covers the warm-up too: the eager steps and the capture are
  // where a step's activations are allocated; graph replays reuse the
  // graph's private pool and allocate nothing new.
  resetPeakAllocated(device);
  for (int64_t i = 0; i < o.warmup; ++i) step.run(inputs, targets);
  synchronize(device);
  ctx.barrier();
  step.zeroLossSum();
  const double elapsed = maxOverRanks(ctx, timedSteps(step, inputs, targets, o.steps, device, o.profile_range));
  const double loss = job.lossSum().item<double>() / static_cast<double>(o.steps);
  if (!std::isfinite(loss)) throw IoError("bench train: the loss is " + std::to_string(loss) + " (diverged)");

  nlohmann::json result;
  result["gpus"] = ctx.size();
  result["device_type"] = device.is_cuda() ? "cuda" : "cpu";
  result["backend"] = ctx.backend();
  result.update(meshFields(job.plan()));
  result["step_ms"] = elapsed * 1e3 / static_cast<double>(o.steps);
  const double samples_per_s =
      static_cast<double>(o.input.batch_size * job.dataRanks() * o.steps) / std::max(elapsed, 1e-12);
  result["samples_per_s"] = samples_per_s;
  result["flops_per_sample"] = job.model().trainingFlopsPerSample();
  const double peak = gpu::peakDenseFlops(job.deviceName(), computePrecisionName(o.execution.precision));
  const double mfu = gpu::modelFlopsUtilisation(samples_per_s, job.model().trainingFlopsPerSample(), ctx.size(), peak);
  if (mfu >= 0) result["mfu"] = mfu;
  if (o.execution.precision == ComputePrecision::kFp8 && lm.layers > 0 && batch.tokens_per_sample > 0) {
    result["fp8_flops_share"] = models::fp8FlopShare(lm, batch.tokens_per_sample);  // MFU stays on the bf16 peak
  }
  if (batch.tokens_per_sample > 0) {
    result["tokens_per_s"] = samples_per_s * static_cast<double>(batch.tokens_per_sample);
    result["seq_len"] = batch.tokens_per_sample;
  }
  result["peak_memory_bytes"] = static_cast<int64_t>(maxOverRanks(ctx, static_cast<double>(peakAllocatedBytes(device))));
  if (auto in = benchMemoryInputs(o, lm, optimizer, ctx.size(), device.is_cuda())) {
    const MemoryEstimate e = estimateMemory(*in);
    result["memory_estimate_bytes"] = {{"parameters", e.parameters}, {"gradients", e.gradients},
                                       {"optimizer", e.optimizer},   {"activations", e.activations},
                                       {"total", e.total()}};
    result["memory_held_bytes"] = {{"parameters", job.dataParallel().parameterBytes()},
                                   {"gradients", job.dataParallel().gradientBytes()},
                                   {"optimizer", job.optimizer().stateBytes()}};
  }
  result["loss"] = loss;
  result["graphs"] = step.graphStatus();
  result["graphed_steps"] = step.graphedSteps();
  result["versions"] = versions(device);
#if DTRAIN_TORCH_CUDA
  if (o.breakdown && device.is_cuda() && !o.execution.cuda_graphs) {
    result["breakdown"] = timeSplit(job, inputs, targets, result["step_ms"].get<double>());
  }
#endif
  if (ctx.isMain()) writeResult(result, o.result_file);
  ctx.barrier();
  return 0;
}

}  // namespace dtrain

extern "C" int dtrain_run_bench_train(const dtrain::BenchTrainOptions* options) {
  return dtrain::runThroughputBench(*options);
}
