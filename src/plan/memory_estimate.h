// What a training job needs per GPU, before it allocates anything: model
// state (parameters, gradients, optimizer state) as this build lays it out
// for each --shard stage, the activations of a language model's step, and
// the ZeRO paper's formula beside them. `dtrain train` and `dtrain bench
// train` print it at start-up and refuse, before training, a job that
// cannot fit, naming the flags that would make it fit. (private to
// train/; torch-free)
//
// Model state per parameter, P parameters on N ranks, AdamW (8 bytes of
// state per parameter; SGD with momentum 4, without 0):
//   none       4 (fp32 parameters) + 4 (fp32 gradients) + 8
//   optimizer  4 + 4 + 8/N
//   gradients  4 + 4/N + 8/N, plus two staging buffers of the largest bucket
//   full       4/N (fp32 master) + c/N (the gathers' input in the compute
//              dtype, c = 2 for bf16/fp16, 0 for fp32) + 4/N + 8/N, plus the
//              gather slots (the root unit and two blocks, compute dtype)
//              and two staging buffers of the largest unit bucket
// LoRA (trainable = the adapters' T parameters): 2 bytes per frozen
// parameter under bf16 (else 4) + 4 T, gradients 4 T (ZeRO-2: 4 T/N and
// staging), optimizer state on T only.
// The ZeRO paper (Rajbhandari et al. 2020, mixed-precision Adam, K = 12)
// counts 16, 4 + 12/N, 2 + 14/N and 16/N: it keeps fp16 parameters and
// gradients beside fp32 master weights where dtrain keeps fp32 parameters
// and lets autocast cast them, so stages 1 and 2 hold 2 to 4 bytes more
// per parameter here and stage 3 c/N more.
//
// Activations of one micro-batch of T tokens (b sequences of s), L blocks
// of width d, MLP width f, key/value width k, vocabulary V, under autocast
// (bf16 matmul inputs, a residual stream of the parameters' dtype: fp32, or
// the compute dtype under --shard full, and the update each block passes
// on in the compute dtype, fp32 for gpt2 under tp), flash attention (no
// T x s scores), as the fused kernels save them (CUDA):
//   gpt2 block: 2 streams (the sums each norm keeps) + 12 d + 2 f bytes
//               per token (bf16: the norms' outputs, q/k/v, the attention
//               output, the MLP's fc product; 4 f without the fused MLP)
//   llama block: 2 streams + 8 d + 4 k + 6 f, k = d when there are fewer
//               key/value heads than heads (attention keeps the copies
//               widened to the query heads)
// With --activation-checkpointing a block keeps only its input (the stream
// and the update) and one block's full set lives during its recomputation.
// Under autocast each block's matrix weights are cast to the compute
// dtype once per forward and the products keep the casts until their
// backward: 2 bytes per block parameter (with checkpointing autocast's
// cache holds them to the end of forward, and each recomputation casts its
// block's again). The step peaks at the larger of the end of forward (the
// head's forward) and one block's backward (its temporaries: one block's
// activations more). The
// fused classifier + cross-entropy (tp 1) computes the gradients of the
// hidden state and of the output weight during forward and keeps them (2 d
// per token; V d in the weight's dtype, fp32) with the final norm's sum;
// while it runs it also holds the normed hidden state and the last update,
// the weight cast and padded to the kernel's rows (64), a chunk of about
// 512 MiB of logits and, for a padded vocabulary such as gpt2's 50257, the
// chunk's weight-gradient product. Under tp the vocabulary-parallel head
// keeps the normed hidden state (2 d); without the fused kernels (CPU) the
// logits in bf16 and fp32 (10 V). These are estimates of the allocator's
// peak: the final summary gives the measured peak beside them; what the
// allocator does not count (the CUDA context, fragmentation) is checkFits'
// margin.
//
// Tensor parallelism over tp ranks (N is then the data-parallel ranks): a
// rank holds 1/tp of every split parameter and all of the whole ones (the
// norms; gpt2's position table and the row-parallel products' biases; llama's
// key/value projections are one head's when there are fewer heads than tp),
// and the ZeRO stages above apply to that. Activations: with sequence
// parallelism a block keeps 1/tp of everything (Korthikanti et al. 2022);
// without it the two streams stay whole and the rest is 1/tp. The fused
// head keeps the whole normed hidden state; the unfused one 1/tp of the logits.
//
// Pipelines (pp > 1): a rank holds its stages' blocks, the embedding with
// the first stage, the final norm and the head (a tied one too) with the
// last, and the ZeRO stages above apply to that. Its activations are
// those its schedule keeps at once: walking its actions, a forward adds
// its stage's blocks (and the head at the last stage) for one micro-batch,
// plus the stream it sends on (fp32, d per token), and, under autocast,
// the compute-dtype copies of the stage's matrix weights its products saved
// (each forward casts them anew: 2 bytes per weight per micro-batch in
// flight) and, at the last stage, the head's gradients; a B frees them, as
// does the W of a zero-bubble schedule (its I keeps them). The estimate is
// the fullest rank's. `tokens` is then one micro-batch's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/lm_config.h"
#include "parallel/parallel_plan.h"
#include "parallel/pipeline_schedule.h"

namespace dtrain {

struct MemoryInputs {
  int64_t parameters = 0;       // P
  int ranks = 1;                // N: the data-parallel ranks
  int tp = 1;                   // tensor-parallel ranks (language models)
  bool sequence_parallel = false;
  ShardStage shard = ShardStage::kNone;
  ComputePrecision precision = ComputePrecision::kFp32;
  ReduceDtype reduce_dtype = ReduceDtype::kFp32;
  double optimizer_state_bytes = 8;  // per parameter: AdamW 8, SGD 4 with momentum, 0 without
  double bucket_mb = 25;        // --bucket-mb (ZeRO-2's staging buffers)
  // LoRA: the adapters' parameters, the only ones with gradients and
  // optimizer state (fp32); the P others are frozen, 2 bytes each under
  // bf16 (else 4). -1: every parameter trains.
  int64_t trainable = -1;
  // Language models (lm not null): the shape and one micro-batch.
  const models::LanguageModelConfig* lm = nullptr;
  int64_t tokens = 0;           // per micro-batch per rank
  bool activation_checkpointing = false;
  bool fused_head = true;       // the fused kernels (CUDA): classifier + cross-entropy, gpt2's MLP
  // Keys and values reach attention as they are (SDPA's enable_gqa: CUDA,
  // libtorch 2.5+, DTRAIN_NATIVE_GQA on): no copies widened to the query heads.
  bool native_gqa = false;
  bool gpu = true;              // a GPU: checkFits leaves room for its context and workspaces
  // Pipelines: the stages (pp x V of them) and the schedule; empty stages
  // mean none.
  std::vector<StageBlocks> stages;
  PipelineSchedule schedule;
};

// A pipeline's memory inputs from a plan (pp > 1): its stages, the
// schedule of its micro-batches, and the tokens of one micro-batch from a
// batch of `batch_size` sequences per pipeline.
void setPipeline(MemoryInputs& in, const ParallelPlan& plan, int64_t batch_size);

struct MemoryEstimate {
  int pp_rank = -1;  // pipelines: the fullest rank, whose estimate this is
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer = 0;
  int64_t activations = 0;
  int64_t total() const { return parameters + gradients + optimizer + activations; }
};

MemoryEstimate estimateMemory(const MemoryInputs& in);

// Bytes one block keeps for its backward per token on a rank (a language
// model's; 0 without one): what the step model counts its memory traffic
// by (plan/step_model.h).
double blockActivationBytesPerToken(const MemoryInputs& in);

// A pipeline's rank `rank` (in.stages set; pp_rank says which).
MemoryEstimate estimatePipelineRank(const MemoryInputs& in, int rank);

// The ZeRO paper's model-state bytes per parameter for a stage on N ranks.
double zeroPaperBytesPerParameter(ShardStage shard, int ranks);

// "1.23 GiB" (below 0.1 GiB: "12.34 MiB").
std::string gibText(int64_t bytes);

// The start-up line's memory part: dtrain's estimate by kind, the paper's
// formula beside it.
std::string describeEstimate(const MemoryInputs& in, const MemoryEstimate& estimate);

// ConfigError when the estimate plus a margin (on a GPU 1 GiB and 5% of the
// device for the CUDA context, cuBLAS/cuDNN workspaces and fragmentation) exceeds
// `device_bytes`: the message gives the estimate by kind, the device's
// size, and the first of these that fits: --shard gradients, --shard full,
// --activation-checkpointing, both, a smaller --batch-size (LoRA: never
// --shard full, which it cannot run with).
void checkFits(const MemoryInputs& in, int64_t device_bytes, const std::string& device_name);
// The estimate plus that margin: what checkFits compares with device_bytes.
int64_t neededDeviceBytes(const MemoryInputs& in, int64_t device_bytes);

}  // namespace dtrain
