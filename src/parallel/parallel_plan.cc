#include "parallel/parallel_plan.h"

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
}

ParallelPlan planParallelism(const ParallelOptions& options, int world_size, const PlannedModel& model) {
  if (world_size < 1) {
    throw ConfigError("a world of " + std::to_string(world_size) + " ranks: expected at least 1");
  }
  if (options.tp < 1 || options.dp_replicate < 1) checkParallelOptions(options, model);
  const int grid = options.tp * options.dp_replicate;
  if (world_size % grid != 0) {
    throw ConfigError("--tp " + std::to_string(options.tp) + " x --dp-replicate " + std::to_string(options.dp_replicate) +
                      " = " + std::to_string(grid) + " ranks does not divide the world of " + std::to_string(world_size) +
                      " ranks (dp_replicate x dp_shard x tp); expected a world that is a multiple of " +
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
  return plan;
}

}  // namespace dtrain
