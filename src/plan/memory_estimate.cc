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

// Bytes per element of the stream a norm keeps for its backward: the sum
// in the stream's dtype, except gpt2's LayerNorm under autocast over a
// compute-dtype stream (--shard full), which normalises and keeps an fp32
// copy of it.
double normSumBytes(const MemoryInputs& in) {
  if (in.shard != ShardStage::kFull || in.lm->family == models::LmFamily::kGpt2) return 4.0;
  return static_cast<double>(computeBytes(in.precision));
}

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
  // Each of the block's two norms adds the pending update to the stream and
  // keeps the sum (not the update) for its backward: two streams' worth.
  const double sums = 2 * normSumBytes(in) * d;
  // Without native grouped-query attention llama widens keys and values to
  // the query heads before attention, which keeps the widened copies (as
  // wide as the queries) when there are fewer key/value heads than heads.
  const double kv =
      static_cast<double>(c.kv_heads < c.heads && !in.native_gqa ? c.heads * c.headDim() : c.kvDim());
  const double narrow = compute / 2;  // fp32 runs keep fp32 copies
  // gpt2's fused MLP keeps the fc product but not the GELU's output.
  const double gpt2_mlp = in.fused_head ? 2 * f : 4 * f;
  const double rest = narrow * (c.family == models::LmFamily::kGpt2 ? 12 * d + gpt2_mlp : 8 * d + 4 * kv + 6 * f);
  b.full = sums + rest;
  if (in.tp > 1) {
    const double tp = static_cast<double>(in.tp);
    b.full = in.sequence_parallel ? b.full / tp : sums + rest / tp;
    if (in.sequence_parallel) b.streams /= tp;
  }
  return b;
}

// The output head's activations per micro-batch: what it keeps until its
// backward (per token and in all) and, on top, what its forward allocates
// for the time it runs.
struct HeadActivations {
  double kept_per_token = 0;
  double kept = 0;
  double forward_per_token = 0;
  double forward = 0;
};

// The compute-dtype copies autocast makes of the matrix weights (each
// product saves its cast weight for backward): the bytes per weight on a
// tp rank. None in fp32, none under ZeRO-3 (the gathered parameters are in
// the compute dtype already) nor of a LoRA base frozen in bf16.
double castBytesPerWeight(const MemoryInputs& in) {
  if (in.precision == ComputePrecision::kFp32 || in.shard == ShardStage::kFull) return 0;
  if (in.trainable >= 0 && in.precision == ComputePrecision::kBf16) return 0;
  return static_cast<double>(computeBytes(in.precision)) / std::max(1, in.tp);
}

// The fused classifier + cross-entropy on one rank (fused_cross_entropy.cc)
// computes the gradients of the hidden state and of the output weight
// during forward and keeps them until backward; forward also holds the
// normed hidden state, the last block's update, the weight in the compute
// dtype (padded to the kernel's row width), a chunk of logits and, for a
// padded or fp32 weight, the chunk's weight-gradient product before it is
// added. A stream of the final norm's sum stays for the norm's backward.
// Under tp the vocabulary-parallel head keeps the normed hidden state and,
// under autocast, its weight shard's cast; without the fused kernels (CPU)
// the logits in bf16 and fp32 and the weight's cast.
HeadActivations headActivations(const MemoryInputs& in) {
  const models::LanguageModelConfig& c = *in.lm;
  HeadActivations h;
  const double d = static_cast<double>(c.dim), vocab = static_cast<double>(c.vocab_size);
  const double compute = static_cast<double>(computeBytes(in.precision));
  const double weight_cast = castBytesPerWeight(in) * vocab * d;
  if (!in.fused_head) {
    h.kept_per_token = 10.0 * vocab / std::max(1, in.tp);
    h.kept = weight_cast;
    return h;
  }
  if (in.tp > 1) {
    h.kept_per_token = 2.0 * d;
    h.kept = weight_cast;
    return h;
  }
  // The output weight's dtype: fp32, the compute dtype when gathered by
  // ZeRO-3, bf16 for a LoRA base frozen in it (no gradient then).
  const bool frozen = in.trainable >= 0;
  const bool narrow_weight = in.shard == ShardStage::kFull || (frozen && in.precision == ComputePrecision::kBf16);
  const double weight = narrow_weight ? compute : 4.0;
  const int64_t padded_vocab = models::fusedHeadPaddedVocab(c.vocab_size);
  const double padded = static_cast<double>(padded_vocab);
  const bool copied = weight != compute || padded_vocab != c.vocab_size;
  h.kept_per_token = normSumBytes(in) * d + compute * d;  // the final norm's sum, the hidden state's gradient
  h.kept = frozen ? 0 : weight * vocab * d;               // the output weight's gradient
  h.forward_per_token = compute * d + compute * d + 4;  // the normed hidden state, the update, the loss
  const double chunk = static_cast<double>(
      models::fusedHeadChunkRows(std::max<int64_t>(1, in.tokens), c.vocab_size, static_cast<int64_t>(compute)));
  h.forward = (copied ? compute * padded * d : 0) + (copied && !frozen ? compute * padded * d : 0) +
              chunk * padded * compute;
  return h;
}

// The parameters of one block (matrix weights, norms and biases).
double blockWeights(const models::LanguageModelConfig& c) {
  models::LanguageModelConfig none = c;
  none.layers = 0;
  return c.layers > 0 ? static_cast<double>(models::parameterCount(c) - models::parameterCount(none)) /
                            static_cast<double>(c.layers)
                      : 0;
}

// The peak of one step's activations without a pipeline: every block's
// saved activations (with checkpointing, its input), then the larger of
// the end of forward, where the head's forward runs and every block's
// weight casts are held (by the products that saved them or, with
// checkpointing, by autocast's cache until forward ends), and one block's
// backward: its temporaries, the size of its saved activations (with
// checkpointing its recomputed activations and casts too).
int64_t activationBytes(const MemoryInputs& in) {
  if (in.lm == nullptr || in.tokens <= 0) return 0;
  const models::LanguageModelConfig& c = *in.lm;
  const BlockActivations block = blockActivations(in);
  const HeadActivations head = headActivations(in);
  const double layers = static_cast<double>(c.layers), tokens = static_cast<double>(in.tokens);
  const bool checkpointing = in.activation_checkpointing;
  const double per_block = checkpointing ? block.streams * static_cast<double>(c.dim) : block.full;
  const double casts = castBytesPerWeight(in) * blockWeights(c);  // one block's
  const double forward_end =
      layers * casts + tokens * (head.kept_per_token + head.forward_per_token) + head.kept + head.forward;
  const double backward = (checkpointing ? casts : layers * casts) + tokens * block.full * (checkpointing ? 2 : 1);
  return static_cast<int64_t>(tokens * layers * per_block + std::max(forward_end, backward));
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
// per token, each in-flight stage's blocks (the head's at the last, the
// stream sent on before it); per micro-batch, under autocast, the copies of
// the stage's matrix weights in the compute dtype that its products saved
// for backward (each forward casts them anew), and the head's gradients at
// the last stage. The head's forward adds its own for the time it runs; a
// block's backward its temporaries.
int64_t pipelineActivationBytes(const MemoryInputs& in, int rank) {
  if (in.lm == nullptr || in.tokens <= 0) return 0;
  const models::LanguageModelConfig& c = *in.lm;
  const BlockActivations block = blockActivations(in);
  const HeadActivations head = headActivations(in);
  const double d = static_cast<double>(c.dim), tokens = static_cast<double>(in.tokens);
  const double per_block = in.activation_checkpointing ? block.streams * d : block.full;
  const double sent = 4.0 * d / (in.sequence_parallel ? in.tp : 1);
  // A forward's casts stay with its micro-batch until its backward; with
  // checkpointing only while it runs (autocast's cache is emptied after
  // each forward), and a block's again in its recomputation.
  const bool checkpointing = in.activation_checkpointing;
  const double cast_weights = castBytesPerWeight(in) * blockWeights(c);
  const double head_forward = tokens * head.forward_per_token + head.forward;
  const int stages = static_cast<int>(in.stages.size());
  using Op = PipelineAction::Op;
  std::map<std::pair<int, int>, double> live;  // (stage, micro-batch): its bytes
  double held = 0, most_held = 0, most = 0;
  for (const PipelineAction& a : in.schedule.ranks.at(rank)) {
    const int stage = in.schedule.stageOf(rank, a.chunk);
    const bool last = stage == stages - 1;
    const auto key = std::make_pair(stage, a.microbatch);
    if (a.op == Op::kForward) {
      const double blocks = static_cast<double>(in.stages[stage].count());
      const double casts = blocks * cast_weights;
      const double bytes = tokens * (blocks * per_block + (last ? head.kept_per_token : sent)) +
                           (checkpointing ? 0 : casts) + (last ? head.kept : 0);
      live[key] = bytes;
      held += bytes;
      most_held = std::max(most_held, held);
      most = std::max(most, held + (checkpointing ? casts : 0) + (last ? head_forward : 0));
    } else if (a.op == Op::kBackward || (a.op == Op::kBackwardWeight && !last) ||
               (a.op == Op::kBackwardInput && last)) {
      held -= live[key];
      live.erase(key);
    }
  }
  // One block's temporaries during its backward (and its recomputation).
  const double backward = (checkpointing ? cast_weights : 0) + tokens * block.full * (checkpointing ? 2 : 1);
  return static_cast<int64_t>(std::max(most, most_held + backward));
}

}  // namespace

double blockActivationBytesPerToken(const MemoryInputs& in) {
  return in.lm == nullptr ? 0 : blockActivations(in).full;
}

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
