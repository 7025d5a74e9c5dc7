// ParallelPlan: the parallelism options of a job (--shard, --reduce-dtype,
// --bucket-mb, the world size) parsed and checked once, as enums and
// sizes, so that no code after the parse compares a flag's word.
// (torch-free: the dtrain binary checks a command's flags without libtorch)
//
//   ParallelPlan plan = planParallelism(options.parallel, ctx.size());
//   if (plan.shardsGradients()) ...;   // ZeRO-2 and ZeRO-3
//
// Contract:
// - planParallelism() throws one ConfigError per bad combination, naming
//   the flags and their values and what would work; a plan it returns is
//   valid and consistent (worldSize() == the world size it was given).
// - The mesh is pp x dp_replicate x dp_shard x tp ranks (tp innermost).
//   Today a job is data-parallel only: dp_shard is the world and the
//   others are 1; the sizes are fields so that later plans add dimensions
//   without changing the readers of the present ones.
// - The words of each enum (shardStageName, ...) are the flags' words and
//   the ones files hold (a checkpoint's "stage"), byte for byte.
#pragma once

#include <cstdint>
#include <string>

namespace dtrain {

// --shard: what is split across the data-parallel ranks.
enum class ShardStage {
  kNone,       // replicated, as DDP
  kOptimizer,  // ZeRO-1: optimizer state
  kGradients,  // ZeRO-2: also the gradients
  kFull,       // ZeRO-3: also the parameters
};

// --reduce-dtype: what gradients are reduce-scattered in (ZeRO-2, ZeRO-3).
enum class ReduceDtype { kFp32, kBf16 };

// --precision: what a step computes in (autocast's dtype; fp16 with loss
// scaling). The runtime turns it into dtrain::Precision (dtrain/amp.h).
enum class ComputePrecision { kFp32, kBf16, kFp16 };

// --backend: the collectives' backend (auto: $DTRAIN_BACKEND, else nccl
// when a GPU is visible).
enum class CommBackend { kAuto, kNccl, kGloo };

// The flags' words: "none" | "optimizer" | "gradients" | "full", ...
const char* shardStageName(ShardStage stage);
const char* reduceDtypeName(ReduceDtype dtype);
const char* computePrecisionName(ComputePrecision precision);
const char* commBackendName(CommBackend backend);

// The process group and the gradient reduction, as the flags give them.
struct ParallelOptions {
  CommBackend backend = CommBackend::kAuto;  // $DTRAIN_BACKEND when auto
  int64_t timeout_s = 600;                   // collective timeout
  double bucket_mb = 25;                     // gradient bucket cap (the first bucket is 1 MiB)
  ShardStage shard = ShardStage::kNone;
  ReduceDtype reduce_dtype = ReduceDtype::kFp32;
};

// What planParallelism needs to know of the model.
struct PlannedModel {
  std::string name;                 // for messages ("--model resnet18")
  bool has_sharding_units = true;   // ZeRO-3 gathers unit by unit (the language models)
};

struct ParallelPlan {
  // The mesh sizes.
  int pp = 1;
  int dp_replicate = 1;
  int dp_shard = 1;  // the data-parallel ranks that shard (today: the world)
  int tp = 1;

  ShardStage shard = ShardStage::kNone;
  ReduceDtype reduce_dtype = ReduceDtype::kFp32;
  double bucket_mb = 25;        // the cap of a gradient bucket
  double first_bucket_mb = 1;   // the first bucket (1 MiB, or bucket_mb if smaller)

  int worldSize() const { return pp * dp_replicate * dp_shard * tp; }
  bool shardsOptimizer() const { return shard != ShardStage::kNone; }
  bool shardsGradients() const { return shard == ShardStage::kGradients || shard == ShardStage::kFull; }
  bool shardsParameters() const { return shard == ShardStage::kFull; }
};

// The plan of `options` over `world_size` ranks; ConfigError (see the
// contract) for a world size below 1, --reduce-dtype bf16 without
// --shard gradients or full, and --shard full over a model without
// sharding units.
ParallelPlan planParallelism(const ParallelOptions& options, int world_size, const PlannedModel& model = {});

}  // namespace dtrain
