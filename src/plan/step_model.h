// The predicted time of one training step of a language model on a
// cluster, for `dtrain plan` (torch-free): a roofline of the step's matrix
// products at a per-GPU efficiency, its memory traffic outside them at the
// GPU's bandwidth, its collectives at bus bandwidths with the overlap
// dtrain gets, and a pipeline's bubble.
//
//   compute   = FLOPs per token x tokens per step (x 4/3 with activation
//               checkpointing: one forward more) / (GPUs x peak x efficiency);
//               under --precision fp8 the share fp8FlopShare runs
//               kFp8Speedup (rowwise: kFp8RowwiseSpeedup) times faster
//   memory    = stepTrafficBytes / (the GPU's bandwidth x kHbmEfficiency):
//               activations, logits and the optimizer's pass (below)
//   bubble    = (pp - 1) / (M + pp - 1) of the pipeline's time (1F1B)
//   data      = the gradients' reduction over the dp ranks (ring: 2 (n-1)/n of
//               4 bytes per parameter of a rank's share, once per step), plus
//               under --shard full the bf16 parameter gathers (forward and
//               backward, every micro-batch); bus bandwidth inside a node when
//               the dp group fits in one, else the network's per GPU;
//               kDataOverlap of backward's time hides it
//   tensor    = 8 collectives per block per micro-batch (sequence parallel),
//               (tp - 1)/tp of the block's activations each, inside a node;
//               kTensorExposed of them exposed
//   pipeline  = each stage boundary's activations forward and gradients back
// The efficiency is the products' alone (the memory term apart): fitted
// by `dtrain plan --calibrate`, set by `--efficiency`, else
// kDefaultEfficiency (llama-1b on an H200).
#pragma once

#include <cstdint>
#include <string>

#include "models/lm_config.h"
#include "parallel/parallel_plan.h"
#include "plan/gpu_catalog.h"
#include "plan/memory_estimate.h"

namespace dtrain::plan {

// The products' share of the bf16 peak when no calibration says: llama-1b
// on one H200 (60,390 tokens/s, 2026-12-02) with the memory term below
// taken out gives 0.607.
inline constexpr double kDefaultEfficiency = 0.6;
// --precision fp8's measured speed-up of the FP8 products' share on 1x H200
// (2026-12-02, gradients written in place: 1.28x the whole bf16 step of
// llama-8b's blocks at a 72.6% share, so 1 / (0.274 + 0.726 / s) = 1.28).
inline constexpr double kFp8Speedup = 1.43;
// --fp8-recipe rowwise's, the same way: 1.156x the bf16 step of llama-8b's
// blocks in the same call (2026-12-02, noted maxima: 35,880 against 31,049
// tokens/s), so 1 / (0.274 + 0.726 / s) = 1.156.
inline constexpr double kFp8RowwiseSpeedup = 1.23;
// The memory term: what a step moves through the GPU's memory outside its
// matrix products, at this share of the GPU's bandwidth (the fused
// elementwise kernels and AdamW's reach 80-90% of it on an H200):
// - each block's saved activations four times (written in forward, read
//   in backward, and their gradients written and read; with activation
//   checkpointing half again for the recomputation);
// - the fused head's logits (tokens x padded vocabulary in the compute
//   dtype) four times (written, read by the loss, gradients written, read
//   by the two products);
// - the optimizer's pass: its state read and written, the fp32 parameters
//   read and written and their gradients read.
inline constexpr double kHbmEfficiency = 0.8;
inline constexpr double kActivationPasses = 4;
inline constexpr double kLogitsPasses = 4;
inline constexpr double kDataOverlap = 0.8;
inline constexpr double kTensorExposed = 0.5;

struct Cluster {
  GpuSpec gpu;
  int nodes = 1;
  int gpus_per_node = 8;
  double intra_node_gbs = 0;  // all-reduce bus bandwidth inside a node, GB/s (0: the GPU's)
  double inter_node_gbs = 45;  // per GPU across nodes, GB/s (400 Gb/s at ~90%)
  double efficiency = kDefaultEfficiency;
  int gpus() const { return nodes * gpus_per_node; }
};

struct Layout {
  int tp = 1;
  int pp = 1;
  int dp = 1;                   // gpus / (tp x pp)
  ShardStage shard = ShardStage::kNone;
  int64_t micro_batch = 1;      // sequences per rank per micro-batch
  int64_t microbatches = 1;     // per optimizer step (accumulation, or the pipeline's M)
  bool activation_checkpointing = false;
  bool fp8 = false;
  bool fp8_rowwise = false;     // with fp8: --fp8-recipe rowwise (else tensorwise)
};

struct StepTime {
  double compute_s = 0;   // the products, bubble excluded
  double memory_s = 0;    // the memory term (above), bubble excluded
  double bubble_s = 0;
  double data_s = 0;      // the data-parallel collectives, all
  double tensor_s = 0;
  double pipeline_s = 0;
  double exposed_s = 0;   // of the three above, what the step waits for
  double step_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;         // model FLOPs (no recomputation) over the bf16 peak
};

// traffic_bytes: stepTrafficBytes of the layout (0: products and
// collectives only).
StepTime predictStep(const models::LanguageModelConfig& model, const Cluster& cluster, const Layout& layout,
                     int64_t tokens_per_step, double traffic_bytes = 0);

// The memory term's bytes per GPU and step for a layout whose memory
// estimate's inputs are `in` (its micro-batch's tokens, blocks, optimizer).
double stepTrafficBytes(const MemoryInputs& in, const Layout& layout);

// The efficiency at which predictStep gives `tokens_per_s` to a one-GPU
// layout (no sharding, one micro-batch of `tokens_per_step` tokens) whose
// memory term is `traffic_bytes`: what `plan --calibrate` fits, and what
// a calibration file's measurement gives the step model of this build.
double fittedEfficiency(const models::LanguageModelConfig& model, const GpuSpec& gpu, int64_t tokens_per_step,
                        double traffic_bytes, double tokens_per_s);

}  // namespace dtrain::plan
