#include "parallel/parallel_plan.h"

#include <iomanip>
#include <sstream>

#include <algorithm>
#include <utility>

#include "common/error.h"

namespace dtrain {

const char* shardStageName(ShardStage stage) {
  switch (stage) {
    case ShardStage::kNone: return "none";
    case ShardStage::kOptimizer: return "optimizer";
    case ShardStage::kGradients: return "gradients";
    case ShardStage::kFull: return "full";
  }
  return "none";
}

const char* reduceDtypeName(ReduceDtype dtype) { return dtype == ReduceDtype::kBf16 ? "bf16" : "fp32"; }

const char* computePrecisionName(ComputePrecision precision) {
  switch (precision) {
    case ComputePrecision::kFp32: return "fp32";
    case ComputePrecision::kBf16: return "bf16";
    case ComputePrecision::kFp16: return "fp16";
    case ComputePrecision::kFp8: return "fp8";
  }
  return "fp32";
}

const char* commBackendName(CommBackend backend) {
  switch (backend) {
    case CommBackend::kAuto: return "auto";
    case CommBackend::kNccl: return "nccl";
    case CommBackend::kGloo: return "gloo";
  }
  return "auto";
}

namespace {

// "--tp 3: <what> (<n>) does not split into 3 equal parts; expected <fix>".
void checkTpSplits(int tp, int64_t n, const std::string& what, const std::string& fix) {
  if (n > 0 && n % tp != 0) {
    throw ConfigError("--tp " + std::to_string(tp) + ": " + what + " (" + std::to_string(n) +
                      ") do not split into " + std::to_string(tp) + " equal parts; expected " + fix);
  }
}

void checkTensorParallel(const ParallelOptions& options, const PlannedModel& model) {
  const int tp = options.tp;
  if (!model.splits_by_tensor) {
    throw ConfigError("--tp " + std::to_string(tp) + " with --model " + model.name +
                      ": tensor parallelism splits the transformer language models (gpt2, llama) only; use --tp 1");
  }
  checkTpSplits(tp, model.heads, "--model " + model.name + "'s attention heads", "a --tp that divides them");
  const int64_t kv = model.kv_heads;
  if (kv >= tp) {
    checkTpSplits(tp, kv, "its key/value heads", "a --tp that divides them (or, with fewer of them than --tp, a "
                                               "multiple of them: each is then replicated)");
  } else if (kv > 0 && tp % kv != 0) {
    throw ConfigError("--tp " + std::to_string(tp) + ": --model " + model.name + "'s " + std::to_string(kv) +
                      " key/value heads, fewer than --tp, are replicated, tp / " + std::to_string(kv) +
                      " ranks each, which needs --tp a multiple of " + std::to_string(kv));
  }
  checkTpSplits(tp, model.ffn_dim, "the MLP's hidden units", "a --tp that divides them");
  checkTpSplits(tp, model.vocab_size, "the vocabulary's entries", "a --vocab-size that --tp divides");
  if (options.sequence_parallel) {
    checkTpSplits(tp, model.seq_len, "the sequence's positions (--seq-len, split by sequence parallelism)",
                "a --seq-len that --tp divides, or --no-sequence-parallel");
  }
}

// The stages of a pipeline: as --pp-split lists them, else balanced by
// the blocks' and the head's FLOPs.
std::vector<StageBlocks> pipelineStagesOf(const ParallelOptions& options, const PlannedModel& model) {
  const int stages = options.pp * options.virtual_stages;
  const int blocks = static_cast<int>(model.layers);
  if (!options.pp_split.empty()) return parsePipelineSplit(options.pp_split, blocks, stages);
  return balancePipelineStages(blocks, stages, model.block_flops, 0, model.head_flops);
}

void checkPipeline(const ParallelOptions& options, const PlannedModel& model) {
  const std::string pp = "--pp " + std::to_string(options.pp);
  if (options.pp < 1) throw ConfigError(pp + ": expected at least 1 pipeline stage");
  if (options.pp == 1) {
    throw ConfigError("--microbatches, --virtual-stages and --pp-split shape a pipeline; with --pp 1 there is "
                      "none (--tokens-per-step accumulates micro-batches without one)");
  }
  if (!model.splits_by_tensor || model.layers < 1) {
    throw ConfigError(pp + " with --model " + model.name +
                      ": pipeline parallelism splits the transformer language models' blocks (gpt2, llama)");
  }
  const bool shards_gradients = options.shard == ShardStage::kGradients || options.shard == ShardStage::kFull;
  if (model.tied_head && shards_gradients) {
    throw ConfigError(pp + " with --shard " + shardStageName(options.shard) + " and a tied head: the first and the "
                      "last stage sum their gradients of it, which sharded gradients do not hold whole; use --shard "
                      "optimizer or none, or --tie-embeddings off");
  }
  const int microbatches = options.microbatches > 0 ? options.microbatches : options.pp;
  buildPipelineSchedule(options.pp_schedule, options.pp, microbatches, options.virtual_stages);  // its ConfigErrors
  const int stages = options.pp * options.virtual_stages;
  if (options.virtual_stages > 1 && options.pp_split.empty() && model.layers % stages != 0) {
    throw ConfigError("--virtual-stages " + std::to_string(options.virtual_stages) + " x " + pp + " = " +
                      std::to_string(stages) + " stages do not divide the model's " + std::to_string(model.layers) +
                      " blocks equally; expected --layers a multiple of " + std::to_string(stages) +
                      " or a --pp-split");
  }
  pipelineStagesOf(options, model);  // more stages than blocks, a --pp-split that does not cover them
}

}  // namespace

PlannedModel plannedLanguageModel(std::string name, int64_t heads, int64_t kv_heads, int64_t ffn_dim,
                                  int64_t vocab_size, int64_t seq_len) {
  PlannedModel model{std::move(name), true, true};
  model.heads = heads;
  model.kv_heads = kv_heads;
  model.ffn_dim = ffn_dim;
  model.vocab_size = vocab_size;
  model.seq_len = seq_len;
  return model;
}

void checkParallelOptions(const ParallelOptions& options, const PlannedModel& model) {
  if (options.tp < 1 || options.dp_replicate < 1) {
    throw ConfigError("--tp " + std::to_string(options.tp) + " --dp-replicate " + std::to_string(options.dp_replicate) +
                      ": expected both at least 1");
  }
  if (options.shard == ShardStage::kFull && !model.has_sharding_units) {
    throw ConfigError("--shard full with --model " + model.name + ": ZeRO-3 gathers a model unit by unit and only "
                      "the language models (gpt2, llama) have sharding units; use --shard gradients");
  }
  const bool shards_gradients = options.shard == ShardStage::kGradients || options.shard == ShardStage::kFull;
  if (options.reduce_dtype != ReduceDtype::kFp32 && !shards_gradients) {
    throw ConfigError(std::string("--reduce-dtype ") + reduceDtypeName(options.reduce_dtype) + " with --shard " +
                      shardStageName(options.shard) +
                      ": only --shard gradients and full reduce from staging buffers of their own dtype; use "
                      "--reduce-dtype fp32 or one of those");
  }
  if (options.tp > 1) checkTensorParallel(options, model);
  if (options.pp != 1 || options.microbatches != 0 || options.virtual_stages != 1 || !options.pp_split.empty()) {
    checkPipeline(options, model);
  }
}

ParallelPlan planParallelism(const ParallelOptions& options, int world_size, const PlannedModel& model) {
  if (world_size < 1) {
    throw ConfigError("a world of " + std::to_string(world_size) + " ranks: expected at least 1");
  }
  if (options.tp < 1 || options.dp_replicate < 1 || options.pp < 1) checkParallelOptions(options, model);
  const int grid = options.pp * options.tp * options.dp_replicate;
  if (world_size % grid != 0) {
    const std::string pp = options.pp > 1 ? "--pp " + std::to_string(options.pp) + " x " : "";
    throw ConfigError(pp + "--tp " + std::to_string(options.tp) + " x --dp-replicate " +
                      std::to_string(options.dp_replicate) + " = " + std::to_string(grid) +
                      " ranks does not divide the world of " + std::to_string(world_size) +
                      " ranks (pp x dp_replicate x dp_shard x tp); expected a world that is a multiple of " +
                      std::to_string(grid));
  }
  checkParallelOptions(options, model);
  ParallelPlan plan;
  plan.tp = options.tp;
  plan.dp_replicate = options.dp_replicate;
  plan.dp_shard = world_size / grid;
  plan.sequence_parallel = options.tp > 1 && options.sequence_parallel;
  plan.tp_overlap = plan.sequence_parallel ? options.tp_overlap : 0;
  plan.shard = options.shard;
  plan.reduce_dtype = options.reduce_dtype;
  plan.bucket_mb = options.bucket_mb;
  plan.first_bucket_mb = std::min(1.0, options.bucket_mb);
  if (options.pp > 1) {
    plan.pp = options.pp;
    plan.microbatches = options.microbatches > 0 ? options.microbatches : options.pp;
    plan.pp_schedule = options.pp_schedule;
    plan.virtual_stages = options.virtual_stages;
    plan.stages = pipelineStagesOf(options, model);
  }
  return plan;
}

std::string describePipeline(const ParallelOptions& options, const PlannedModel& model) {
  if (options.pp < 2) throw ConfigError("--pp-print-schedule: --pp " + std::to_string(options.pp) + " has no pipeline");
  checkParallelOptions(options, model);
  const int microbatches = options.microbatches > 0 ? options.microbatches : options.pp;
  const PipelineSchedule schedule =
      buildPipelineSchedule(options.pp_schedule, options.pp, microbatches, options.virtual_stages);
  const std::vector<StageBlocks> stages = pipelineStagesOf(options, model);
  std::ostringstream out;
  out << "# stages (blocks): " << formatPipelineStages(stages) << "\n";
  out << formatPipelineSchedule(schedule);
  out << formatPipelineTimeline(schedule);
  const ScheduleSimulation run = simulatePipelineSchedule(schedule);
  out << "# bubble: " << std::fixed << std::setprecision(3) << run.bubble << " simulated";
  if (options.pp_schedule != PipelineScheduleKind::kZeroBubbleH1) {
    out << ", " << theoreticalPipelineBubble(options.pp, microbatches, options.virtual_stages)
        << " = (p - 1) / (V M + p - 1)";
  }
  out << "\n";
  return out.str();
}

}  // namespace dtrain
