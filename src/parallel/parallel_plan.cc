#include "parallel/parallel_plan.h"

#include <algorithm>

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

ParallelPlan planParallelism(const ParallelOptions& options, int world_size, const PlannedModel& model) {
  if (world_size < 1) {
    throw ConfigError("a world of " + std::to_string(world_size) + " ranks: expected at least 1");
  }
  const std::string shard = shardStageName(options.shard);
  if (options.shard == ShardStage::kFull && !model.has_sharding_units) {
    throw ConfigError("--shard full with --model " + model.name + ": ZeRO-3 gathers a model unit by unit and only "
                      "the language models (gpt2, llama) have sharding units; use --shard gradients");
  }
  ParallelPlan plan;
  plan.dp_shard = world_size;
  plan.shard = options.shard;
  plan.reduce_dtype = options.reduce_dtype;
  if (plan.reduce_dtype != ReduceDtype::kFp32 && !plan.shardsGradients()) {
    throw ConfigError(std::string("--reduce-dtype ") + reduceDtypeName(plan.reduce_dtype) + " with --shard " + shard +
                      ": only --shard gradients and full reduce from staging buffers of their own dtype; use "
                      "--reduce-dtype fp32 or one of those");
  }
  plan.bucket_mb = options.bucket_mb;
  plan.first_bucket_mb = std::min(1.0, options.bucket_mb);
  return plan;
}

}  // namespace dtrain
