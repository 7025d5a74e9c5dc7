#include "plan/memory_estimate.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "common/error.h"
#include "models/lm_counts.h"

namespace dtrain {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

int64_t computeBytes(ComputePrecision precision) { return precision == ComputePrecision::kFp32 ? 4 : 2; }

// Bytes per token of one block's saved activations, and of its input (the
// residual stream and the pending update, per element of the width).
struct BlockActivations {
  double streams = 8;
  double full = 0;
};

BlockActivations blockActivations(const MemoryInputs& in) {
  const models::LanguageModelConfig& c = *in.lm;
  BlockActivations b;
  // The residual stream has the parameters' dtype: fp32, or the compute
  // dtype when ZeRO-3 gathers the parameters in it. The update a block
  // passes on (its last product, added by the next norm) has the compute
  // dtype, except gpt2's under tp, whose bias is added after the reduction
  // (fp32 by type promotion).
  const double compute = static_cast<double>(computeBytes(in.precision));
  const double residual = in.shard == ShardStage::kFull ? compute : 4.0;
  const double update = c.family == models::LmFamily::kGpt2 && in.tp > 1 ? 4.0 : compute;
  b.streams = residual + update;
  const double d = static_cast<double>(c.dim), f = static_cast<double>(c.ffn_dim);
  const double k = static_cast<double>(c.kvDim());
  const double narrow = static_cast<double>(computeBytes(in.precision)) / 2;  // fp32 runs keep fp32 copies
  // gpt2's fused MLP keeps the fc product but not the GELU's output.
  const double gpt2_mlp = in.fused_head ? 2 * f : 4 * f;
  b.full = b.streams * d + narrow * (c.family == models::LmFamily::kGpt2 ? 12 * d + gpt2_mlp : 8 * d + 4 * k + 6 * f);
  if (in.tp > 1) {
    const double tp = static_cast<double>(in.tp);
    b.full = in.sequence_parallel ? b.full / tp : b.streams * d + (b.full - b.streams * d) / tp;
    if (in.sequence_parallel) b.streams /= tp;
  }
  return b;
}

int64_t activationBytes(const MemoryInputs& in) {
  if (in.lm == nullptr || in.tokens <= 0) return 0;
  const models::LanguageModelConfig& c = *in.lm;
  const BlockActivations block = blockActivations(in);
  const double layers = static_cast<double>(c.layers);
  const double kept = in.activation_checkpointing ? layers * block.streams * static_cast<double>(c.dim) +
                                                        block.full
                                                  : layers * block.full;
  const double head = in.fused_head ? 2.0 * static_cast<double>(c.dim)
                                    : 10.0 * static_cast<double>(c.vocab_size) / std::max(1, in.tp);
  const double backward = block.full;  // one block's temporaries during its backward
  return static_cast<int64_t>(static_cast<double>(in.tokens) * (kept + head + backward));
}

// Gather slots and staging buffers of ZeRO-3 (and ZeRO-2's staging), from
// the shape: the root unit and the largest block.
struct UnitSizes {
  int64_t root = 0;
  int64_t block = 0;
  int64_t largest_bucket = 0;  // a block, or the largest table of the root
};

UnitSizes unitSizes(const MemoryInputs& in) {
  UnitSizes u;
  if (in.lm == nullptr || in.lm->layers <= 0) {
    u.root = in.parameters;
    u.largest_bucket = in.parameters;
    return u;
  }
  const models::LanguageModelConfig& c = *in.lm;
  const int64_t d = c.dim, f = c.ffn_dim, k = c.kvDim();
  const int64_t embedding = c.vocab_size * d;
  if (c.family == models::LmFamily::kGpt2) {
    u.block = 4 * d * d + 2 * d * f + 9 * d + f + 4 * d;  // attention, MLP, biases, two LayerNorms
    u.root = embedding + c.max_seq_len * d + 2 * d + (c.tie_embeddings ? 0 : embedding);
  } else {
    u.block = 2 * d * d + 2 * d * k + 3 * d * f + 2 * d;
    u.root = embedding + d + (c.tie_embeddings ? 0 : embedding);
  }
  u.largest_bucket = std::max(u.block, embedding);
  return u;
}

std::string flagsText(ShardStage shard, bool checkpointing) {
  std::string text = std::string("--shard ") + shardStageName(shard);
  if (checkpointing) text += " --activation-checkpointing";
  return text;
}

// The parameters one tp rank holds (all of them at tp 1).
double parametersPerTpRank(const MemoryInputs& in) {
  if (in.tp <= 1 || in.lm == nullptr) return static_cast<double>(in.parameters);
  const models::LanguageModelConfig& c = *in.lm;
  const double d = static_cast<double>(c.dim), layers = static_cast<double>(c.layers), tp = static_cast<double>(in.tp);
  const double whole = c.family == models::LmFamily::kGpt2
                           ? layers * 6 * d + 2 * d + static_cast<double>(c.max_seq_len) * d
                           : layers * 2 * d + d;
  double rank = (static_cast<double>(in.parameters) - whole) / tp + whole;
  if (c.family == models::LmFamily::kLlama && c.kv_heads < in.tp) {
    // wk and wv: one head's rows each instead of kv_heads / tp of them.
    const double head_rows = static_cast<double>(c.headDim()), kv = static_cast<double>(c.kvDim());
    rank += layers * 2 * d * (head_rows - kv / tp);
  }
  return rank;
}

// The model state (and, without a pipeline, the activations) of `in`.
MemoryEstimate estimateWhole(const MemoryInputs& in) {
  MemoryEstimate e;
  const double p = parametersPerTpRank(in), n = static_cast<double>(std::max(1, in.ranks));
  const double state = in.optimizer_state_bytes;
  const double reduce = in.reduce_dtype == ReduceDtype::kBf16 ? 2 : 4;
  UnitSizes units = unitSizes(in);
  units.root /= std::max(1, in.tp);
  units.block /= std::max(1, in.tp);
  units.largest_bucket /= std::max(1, in.tp);
  const double largest_bucket = static_cast<double>(units.largest_bucket);
  if (in.shard == ShardStage::kFull) {
    const double c = static_cast<double>(computeBytes(in.precision));
    // A pipeline stage keeps every unit it holds gathered through the step;
    // otherwise the root and two blocks' slots.
    const double slots = in.stages.empty() ? static_cast<double>(units.root + 2 * units.block) : p;
    e.parameters = static_cast<int64_t>(4 * p / n + c * slots);
    e.gradients = static_cast<int64_t>(4 * p / n + 2 * reduce * largest_bucket);
    e.optimizer = static_cast<int64_t>(state * p / n);
  } else if (in.trainable >= 0) {
    // LoRA: the frozen base in bf16 under --precision bf16 (else fp32), no gradient or state of its own.
    const double t = static_cast<double>(in.trainable);
    const double frozen = in.precision == ComputePrecision::kBf16 ? 2 : 4;
    const double staging = 2 * reduce * std::min(t, in.bucket_mb * (1 << 20) / 4);
    e.parameters = static_cast<int64_t>(frozen * p + 4 * t);
    e.gradients = static_cast<int64_t>(in.shard == ShardStage::kGradients ? 4 * t / n + staging : 4 * t);
    e.optimizer = static_cast<int64_t>(in.shard == ShardStage::kNone ? state * t : state * t / n);
  } else {
    e.parameters = static_cast<int64_t>(4 * p);
    e.gradients = in.shard == ShardStage::kGradients
                      ? static_cast<int64_t>(4 * p / n + 2 * reduce * in.bucket_mb * (1 << 20) / 4)
                      : static_cast<int64_t>(4 * p);
    e.optimizer = static_cast<int64_t>(in.shard == ShardStage::kNone ? state * p : state * p / n);
  }
  e.activations = activationBytes(in);
  return e;
}

// One pipeline rank's share of the model: a config of its blocks and the
// parameters it holds (the embedding with the first stage; the final norm
// and the head, a tied one too, with the last).
struct RankShare {
  models::LanguageModelConfig config;
  int64_t parameters = 0;
};

RankShare rankShare(const MemoryInputs& in, int rank) {
  const models::LanguageModelConfig& c = *in.lm;
  models::LanguageModelConfig none = c;
  none.layers = 0;
  const int64_t base = models::parameterCount(none);
  const int64_t per_block = c.layers > 0 ? (models::parameterCount(c) - base) / c.layers : 0;
  const int64_t embedding = c.vocab_size * c.dim + (c.family == models::LmFamily::kGpt2 ? c.max_seq_len * c.dim : 0);
  const int64_t head = base - embedding + (c.tie_embeddings ? c.vocab_size * c.dim : 0);
  RankShare share{c, 0};
  share.config.layers = 0;
  const int stages = static_cast<int>(in.stages.size());
  for (int stage = rank; stage < stages; stage += in.schedule.pp) {
    share.config.layers += in.stages[stage].count();
    share.parameters += per_block * in.stages[stage].count();
    if (stage == 0) share.parameters += embedding;
    if (stage == stages - 1) share.parameters += head;
  }
  return share;
}

// The most activation bytes a pipeline rank's schedule keeps at once:
// per token, each in-flight stage's blocks (the head at the last, the
// stream sent on before it); per micro-batch, under autocast, the copies of
// the stage's matrix weights in the compute dtype that its products saved
// for backward (each forward casts them anew).
int64_t pipelineActivationBytes(const MemoryInputs& in, int rank) {
  if (in.lm == nullptr || in.tokens <= 0) return 0;
  const models::LanguageModelConfig& c = *in.lm;
  const BlockActivations block = blockActivations(in);
  const double d = static_cast<double>(c.dim), tokens = static_cast<double>(in.tokens);
  const double per_block = in.activation_checkpointing ? block.streams * d : block.full;
  const double head = in.fused_head ? 2.0 * d : 10.0 * static_cast<double>(c.vocab_size) / std::max(1, in.tp);
  const double sent = 4.0 * d / (in.sequence_parallel ? in.tp : 1);
  const bool casts = in.precision != ComputePrecision::kFp32 && in.shard != ShardStage::kFull;
  models::LanguageModelConfig none = c;
  none.layers = 0;
  const double block_weights = c.layers > 0 ? static_cast<double>(models::parameterCount(c) -
                                                                  models::parameterCount(none)) / c.layers : 0;
  const double tp = static_cast<double>(std::max(1, in.tp));
  const double cast_bytes = casts ? static_cast<double>(computeBytes(in.precision)) / tp : 0;
  const int stages = static_cast<int>(in.stages.size());
  using Op = PipelineAction::Op;
  std::map<std::pair<int, int>, double> live;  // (stage, micro-batch): its bytes
  double held = 0, most = 0;
  for (const PipelineAction& a : in.schedule.ranks.at(rank)) {
    const int stage = in.schedule.stageOf(rank, a.chunk);
    const bool last = stage == stages - 1;
    const auto key = std::make_pair(stage, a.microbatch);
    if (a.op == Op::kForward) {
      const double blocks = static_cast<double>(in.stages[stage].count());
      const double weights = blocks * block_weights + (last ? static_cast<double>(c.vocab_size) * d : 0);
      const double bytes = tokens * (blocks * per_block + (last ? head : sent)) + cast_bytes * weights;
      live[key] = bytes;
      held += bytes;
      most = std::max(most, held);
    } else if (a.op == Op::kBackward || (a.op == Op::kBackwardWeight && !last) ||
               (a.op == Op::kBackwardInput && last)) {
      held -= live[key];
      live.erase(key);
    }
  }
  // One block's temporaries during its backward (and its recomputation).
  return static_cast<int64_t>(most + tokens * block.full);
}

}  // namespace

MemoryEstimate estimatePipelineRank(const MemoryInputs& in, int rank) {
  const RankShare share = rankShare(in, rank);
  MemoryInputs mine = in;
  mine.lm = &share.config;
  mine.parameters = share.parameters;
  mine.tokens = 0;  // the activations are the schedule's, below
  MemoryEstimate e = estimateWhole(mine);
  e.pp_rank = rank;
  e.activations = pipelineActivationBytes(in, rank);
  return e;
}

void setPipeline(MemoryInputs& in, const ParallelPlan& plan, int64_t batch_size) {
  if (plan.pp <= 1) return;
  in.stages = plan.stages;
  in.schedule = buildPipelineSchedule(plan.pp_schedule, plan.pp, plan.microbatches, plan.virtual_stages);
  if (in.lm != nullptr) in.tokens = batch_size / plan.microbatches * in.lm->seq_len;
}

MemoryEstimate estimateMemory(const MemoryInputs& in) {
  if (in.stages.empty() || in.lm == nullptr) return estimateWhole(in);
  MemoryEstimate fullest;
  for (int rank = 0; rank < in.schedule.pp; ++rank) {
    const MemoryEstimate e = estimatePipelineRank(in, rank);
    if (fullest.pp_rank < 0 || e.total() > fullest.total()) fullest = e;
  }
  return fullest;
}

double zeroPaperBytesPerParameter(ShardStage shard, int ranks) {
  const double n = static_cast<double>(std::max(1, ranks));
  switch (shard) {
    case ShardStage::kOptimizer: return 4 + 12 / n;
    case ShardStage::kGradients: return 2 + 14 / n;
    case ShardStage::kFull: return 16 / n;
    case ShardStage::kNone: break;
  }
  return 16;
}

std::string gibText(int64_t bytes) {
  char text[32];
  if (bytes < kGiB / 10) {
    std::snprintf(text, sizeof(text), "%.2f MiB", static_cast<double>(bytes) / static_cast<double>(1 << 20));
  } else {
    std::snprintf(text, sizeof(text), "%.2f GiB", static_cast<double>(bytes) / static_cast<double>(kGiB));
  }
  return text;
}

std::string describeEstimate(const MemoryInputs& in, const MemoryEstimate& e) {
  double paper = zeroPaperBytesPerParameter(in.shard, in.ranks);
  std::string text = "memory per rank (estimate";
  if (e.pp_rank >= 0) {
    const RankShare share = rankShare(in, e.pp_rank);
    MemoryInputs mine = in;
    mine.lm = &share.config;
    mine.parameters = share.parameters;
    paper *= parametersPerTpRank(mine);
    text += ", the fullest pipeline rank: " + std::to_string(e.pp_rank);
  } else {
    paper *= in.trainable >= 0 ? static_cast<double>(in.trainable) : parametersPerTpRank(in);  // LoRA: the adapters
  }
  text += "): parameters " + gibText(e.parameters) + ", gradients " +
                     gibText(e.gradients) + ", optimizer state " + gibText(e.optimizer);
  if (in.lm != nullptr) text += ", activations " + gibText(e.activations);
  char formula[128];
  std::snprintf(formula, sizeof(formula), "; the ZeRO paper's model state for --shard %s: %.2f bytes/param = ",
                shardStageName(in.shard), zeroPaperBytesPerParameter(in.shard, in.ranks));
  return text + formula + gibText(static_cast<int64_t>(paper)) + (in.trainable >= 0 ? " for the adapters" : "");
}

int64_t neededDeviceBytes(const MemoryInputs& in, int64_t device_bytes) {
  return estimateMemory(in).total() + (in.gpu ? kGiB + device_bytes / 20 : 0);
}

void checkFits(const MemoryInputs& in, int64_t device_bytes, const std::string& device_name) {
  const auto needs = [device_bytes](const MemoryInputs& m) { return neededDeviceBytes(m, device_bytes); };
  if (device_bytes <= 0 || needs(in) <= device_bytes) return;
  const MemoryEstimate e = estimateMemory(in);
  std::string why = "the model does not fit on " + device_name + " (" + gibText(device_bytes) + "): " +
                    describeEstimate(in, e) + ", " + gibText(needs(in)) +
                    (in.gpu ? " with the workspace margin" : " in all");
  std::vector<std::pair<ShardStage, bool>> tries;
  const bool lora = in.trainable >= 0;  // --shard full is refused; the model state is the frozen base's
  if (in.shard == ShardStage::kNone || in.shard == ShardStage::kOptimizer) {
    tries.push_back({ShardStage::kGradients, in.activation_checkpointing});
  }
  if (!lora) tries.push_back({ShardStage::kFull, in.activation_checkpointing});
  if (in.lm != nullptr && !in.activation_checkpointing) {
    tries.push_back({in.shard, true});
    if (!lora) tries.push_back({ShardStage::kFull, true});
  }
  for (const auto& [shard, checkpointing] : tries) {
    MemoryInputs alt = in;
    alt.shard = shard;
    alt.activation_checkpointing = checkpointing;
    if (needs(alt) <= device_bytes) {
      throw ConfigError(why + "; " + flagsText(shard, checkpointing) + " would need about " + gibText(needs(alt)));
    }
  }
  throw ConfigError(why + (lora ? "; even --activation-checkpointing would need about "
                                 : "; even --shard full --activation-checkpointing would need about ") + [&] {
    MemoryInputs alt = in;
    if (!lora) alt.shard = ShardStage::kFull;
    alt.activation_checkpointing = in.lm != nullptr;
    return gibText(needs(alt));
  }() + (in.gpu ? ": use more GPUs (--nproc-per-node / more nodes), a smaller --batch-size or a smaller model"
                : ": use more hosts (the ranks of one host share its memory), a smaller --batch-size or a smaller "
                  "model"));
}

}  // namespace dtrain
