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
// - The mesh is pp x dp_replicate x dp_shard x tp ranks (tp innermost:
//   the ranks of a tp group are consecutive, the GPUs of one node;
//   parallel/device_mesh.h draws the layout). --shard applies within a
//   dp_shard group; gradients are then all-reduced across dp_replicate.
//   The pp ranks of one pipeline hold its stages (--pp, the outermost
//   dimension: rank r's pipeline neighbours are r +- world / pp).
// - The words of each enum (shardStageName, ...) are the flags' words and
//   the ones files hold (a checkpoint's "stage"), byte for byte.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/pipeline_schedule.h"

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
enum class ComputePrecision { kFp32, kBf16, kFp16, kFp8 };

// --backend: the collectives' backend (auto: $DTRAIN_BACKEND, else nccl
// when a GPU is visible).
enum class CommBackend { kAuto, kNccl, kGloo };

// The flags' words: "none" | "optimizer" | "gradients" | "full", ...
const char* shardStageName(ShardStage stage);
const char* reduceDtypeName(ReduceDtype dtype);
const char* computePrecisionName(ComputePrecision precision);
const char* commBackendName(CommBackend backend);

// The process group, the mesh and the gradient reduction, as the flags give them.
struct ParallelOptions {
  CommBackend backend = CommBackend::kAuto;  // $DTRAIN_BACKEND when auto
  int64_t timeout_s = 600;                   // collective timeout
  double bucket_mb = 25;                     // gradient bucket cap (the first bucket is 1 MiB)
  ShardStage shard = ShardStage::kNone;
  ReduceDtype reduce_dtype = ReduceDtype::kFp32;
  int tp = 1;                    // --tp: tensor-parallel ranks (innermost: one node's GPUs)
  int dp_replicate = 1;          // --dp-replicate: replicas of the sharded groups (HSDP)
  bool sequence_parallel = true; // --sequence-parallel: with tp > 1, norms and residuals on sequence shards
  int tp_overlap = 0;            // --tp-overlap: pieces of each rank's part of the sequence (0: no overlap)
  int pp = 1;                    // --pp: pipeline stages (outermost)
  int microbatches = 0;          // --microbatches: per step and pipeline (0: pp)
  PipelineScheduleKind pp_schedule = PipelineScheduleKind::k1F1B;  // --pp-schedule
  int virtual_stages = 1;        // --virtual-stages: stages per pp rank (interleaved-1f1b)
  std::string pp_split;          // --pp-split: blocks per stage ("" balances them by compute)
  bool pp_print_schedule = false;  // --pp-print-schedule: print the pipeline's plan and exit
};

// What planParallelism needs to know of the model. The shape fields are
// those of a transformer language model; 0 where the model has none.
struct PlannedModel {
  std::string name;                 // for messages ("--model resnet18")
  bool has_sharding_units = true;   // ZeRO-3 gathers unit by unit (the language models)
  bool splits_by_tensor = false;    // tensor parallelism has a plan for it (gpt2, llama)
  int64_t heads = 0;
  int64_t kv_heads = 0;   // llama's grouped-query key/value heads (gpt2: = heads)
  int64_t ffn_dim = 0;    // the MLP's hidden units
  int64_t vocab_size = 0; // the (padded) vocabulary
  int64_t seq_len = 0;
  // Pipeline stages: the blocks, and the training FLOPs per token of one
  // block and of the head (the final norm, the output product and the
  // loss), which the stages are balanced by.
  int64_t layers = 0;
  bool tied_head = false;  // the output head is the token embedding (first and last stage hold it)
  double block_flops = 1;
  double head_flops = 0;
};

// A transformer language model (sharding units, a tensor-parallel plan) of
// this shape.
PlannedModel plannedLanguageModel(std::string name, int64_t heads, int64_t kv_heads, int64_t ffn_dim,
                                  int64_t vocab_size, int64_t seq_len);

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

  bool sequence_parallel = false;  // tp > 1 with activations on sequence shards between blocks
  int tp_overlap = 0;              // with sequence parallelism: the pieces its products overlap their collectives in

  // Pipeline parallelism (pp > 1): pp x virtual_stages stages of the
  // blocks (stage s on pp rank s % pp) run by a schedule of microbatches
  // per step.
  int microbatches = 1;
  PipelineScheduleKind pp_schedule = PipelineScheduleKind::k1F1B;
  int virtual_stages = 1;
  std::vector<StageBlocks> stages;  // pp x virtual_stages of them, in order

  int worldSize() const { return pp * dp_replicate * dp_shard * tp; }
  int dataParallelSize() const { return dp_replicate * dp_shard; }
  // The key/value heads each tp rank holds copies of rather than a share
  // of: true when there are fewer of them than tp ranks.
  bool replicatesKvHeads(int64_t kv_heads) const { return kv_heads < tp; }
  bool shardsOptimizer() const { return shard != ShardStage::kNone; }
  bool shardsGradients() const { return shard == ShardStage::kGradients || shard == ShardStage::kFull; }
  bool shardsParameters() const { return shard == ShardStage::kFull; }
};

// The checks that need no world size (a command's flags at parse time):
// ConfigError for --reduce-dtype bf16 without --shard gradients or full,
// --shard full over a model without sharding units, --tp or
// --dp-replicate below 1, and --tp > 1 over a model without a
// tensor-parallel plan or whose heads, key/value heads (at least tp of
// them: split, so tp must divide them; fewer: replicated, so they must
// divide tp), MLP width, vocabulary or (with sequence parallelism)
// sequence length do not split into tp equal parts; each message names
// the flags and the numbers.
void checkParallelOptions(const ParallelOptions& options, const PlannedModel& model = {});

// The plan of `options` over `world_size` ranks: ConfigError for a world
// size below 1 or not a multiple of tp x dp_replicate, then
// checkParallelOptions's. dp_shard is what remains of the world.
ParallelPlan planParallelism(const ParallelOptions& options, int world_size, const PlannedModel& model = {});

// --pp-print-schedule's text: the stages' blocks, each rank's actions,
// the simulated timeline (equal costs: F, I and W one unit each) and the
// bubble, simulated beside (p - 1) / (V M + p - 1). Checks the options
// first (ConfigError as checkParallelOptions; --pp 1 too).
std::string describePipeline(const ParallelOptions& options, const PlannedModel& model);

}  // namespace dtrain
