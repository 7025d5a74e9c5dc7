// The predicted time of one training step of a language model on a
// cluster, for `dtrain plan` (torch-free): a roofline of the step's matrix
// products at a per-GPU efficiency, its collectives at bus bandwidths with
// the overlap dtrain gets, and a pipeline's bubble.
//
//   compute   = FLOPs per token x tokens per step (x 4/3 with activation
//               checkpointing: one forward more) / (GPUs x peak x efficiency);
//               under --precision fp8 the share fp8FlopShare runs
//               kFp8Speedup times faster
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
// Efficiency defaults to what dtrain measured (docs/benchmarks.md: 44-50%
// MFU of llama on H200); `dtrain plan --efficiency` sets it.
#pragma once

#include <cstdint>
#include <string>

#include "models/lm_config.h"
#include "parallel/parallel_plan.h"
#include "plan/gpu_catalog.h"

namespace dtrain::plan {

inline constexpr double kDefaultEfficiency = 0.45;
// --precision fp8's measured speed-up of the FP8 products' share on 1x H200
// (2026-12-02, with the transposing cast: 1.23x the whole bf16 step of
// llama-8b's blocks at a 73% share, so 1 / (0.27 + 0.73 / s) = 1.23).
inline constexpr double kFp8Speedup = 1.34;
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
};

struct StepTime {
  double compute_s = 0;   // the products and the rest, bubble excluded
  double bubble_s = 0;
  double data_s = 0;      // the data-parallel collectives, all
  double tensor_s = 0;
  double pipeline_s = 0;
  double exposed_s = 0;   // of the three above, what the step waits for
  double step_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;         // model FLOPs (no recomputation) over the bf16 peak
};

StepTime predictStep(const models::LanguageModelConfig& model, const Cluster& cluster, const Layout& layout,
                     int64_t tokens_per_step);

}  // namespace dtrain::plan
