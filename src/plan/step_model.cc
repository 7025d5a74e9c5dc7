#include "plan/step_model.h"

#include <algorithm>

#include "models/lm_counts.h"

namespace dtrain::plan {

double stepTrafficBytes(const MemoryInputs& in, const Layout& l) {
  double bytes = 0;
  const MemoryEstimate e = estimateMemory(in);
  if (in.optimizer_state_bytes > 0) {
    // State read and written; per updated parameter (state / its bytes per
    // parameter) 4 + 4 bytes of fp32 parameter and 4 of gradient.
    bytes += static_cast<double>(e.optimizer) * (2 + 12 / in.optimizer_state_bytes);
  }
  if (in.lm != nullptr && in.tokens > 0) {
    const double tokens = static_cast<double>(in.tokens) * static_cast<double>(l.microbatches);
    const double blocks = static_cast<double>(in.lm->layers) / std::max(1, l.pp);
    const double passes = kActivationPasses * (l.activation_checkpointing ? 1.5 : 1.0);
    bytes += tokens * blocks * blockActivationBytesPerToken(in) * passes;
    const double element = in.precision == ComputePrecision::kFp32 ? 4 : 2;
    bytes += tokens * static_cast<double>(models::fusedHeadPaddedVocab(in.lm->vocab_size)) / std::max(1, l.tp) *
             element * kLogitsPasses;
  }
  return bytes;
}

double fittedEfficiency(const models::LanguageModelConfig& model, const GpuSpec& gpu, int64_t tokens_per_step,
                        double traffic_bytes, double tokens_per_s) {
  const double step = static_cast<double>(tokens_per_step) / tokens_per_s;
  const double memory = traffic_bytes / (gpu.hbm_tbs * 1e12 * kHbmEfficiency);
  // The products' time: what the step leaves beyond the memory term (at
  // least a tenth of it, should the term come out larger).
  const double products = std::max(step - memory, 0.1 * step);
  const double flops = models::trainingFlopsPerToken(model, model.seq_len) * static_cast<double>(tokens_per_step);
  return flops / (gpu.bf16_tflops * 1e12 * products);
}

StepTime predictStep(const models::LanguageModelConfig& model, const Cluster& cluster, const Layout& l,
                     int64_t tokens_per_step, double traffic_bytes) {
  StepTime t;
  const double gpus = cluster.gpus();
  const double peak = cluster.gpu.bf16_tflops * 1e12;
  const double flops_per_token = models::trainingFlopsPerToken(model, model.seq_len);
  const double model_flops = flops_per_token * static_cast<double>(tokens_per_step);
  double time_factor = l.activation_checkpointing ? 4.0 / 3.0 : 1.0;
  if (l.fp8) {
    const double share = models::fp8FlopShare(model, model.seq_len);
    time_factor *= (1 - share) + share / (l.fp8_rowwise ? kFp8RowwiseSpeedup : kFp8Speedup);
  }
  t.compute_s = model_flops * time_factor / (gpus * peak * cluster.efficiency);
  if (cluster.gpu.hbm_tbs > 0) t.memory_s = traffic_bytes / (cluster.gpu.hbm_tbs * 1e12 * kHbmEfficiency);
  const double busy = t.compute_s + t.memory_s;
  if (l.pp > 1) {
    const double bubble = static_cast<double>(l.pp - 1) / static_cast<double>(l.microbatches + l.pp - 1);
    t.bubble_s = busy * bubble / (1 - bubble);
  }

  const double intra = (cluster.intra_node_gbs > 0 ? cluster.intra_node_gbs : cluster.gpu.intra_node_busbw) * 1e9;
  const double inter = cluster.inter_node_gbs * 1e9;
  // A rank's share of the parameters: 1 / (tp x pp) of them.
  const double params = static_cast<double>(models::parameterCount(model)) / (l.tp * l.pp);
  if (l.dp > 1) {
    const double n = l.dp;
    const double bw = l.dp * l.tp <= cluster.gpus_per_node ? intra : inter;
    double bytes = 2 * (n - 1) / n * 4 * params;  // fp32 gradients reduced (and ZeRO's parameters gathered back)
    if (l.shard == ShardStage::kFull) {
      // bf16 gathers forward and backward per micro-batch (the fp32 gather back is not needed).
      bytes = (n - 1) / n * (4 * params + 2 * 2 * params * static_cast<double>(l.microbatches));
    }
    t.data_s = bytes / bw;
  }
  const double tokens_per_micro = static_cast<double>(l.micro_batch * model.seq_len);
  const double micro = static_cast<double>(l.microbatches);
  const double blocks_per_rank = static_cast<double>(model.layers) / l.pp;
  if (l.tp > 1) {
    const double bytes = 8 * blocks_per_rank * micro * (l.tp - 1.0) / l.tp * tokens_per_micro * model.dim * 2;
    t.tensor_s = bytes / intra;
  }
  if (l.pp > 1) {
    // fp32 stream forward, its gradient back, per micro-batch; the 1/tp
    // sequence shard each under sequence parallelism.
    const double bytes = 2 * micro * tokens_per_micro * model.dim * 4 / l.tp;
    const bool across = l.tp * l.dp * l.pp > cluster.gpus_per_node;
    t.pipeline_s = bytes / (across ? inter : intra);
  }
  const double backward = busy * 2.0 / 3.0;
  t.exposed_s = std::max(0.0, t.data_s - kDataOverlap * backward) + kTensorExposed * t.tensor_s + t.pipeline_s;
  t.step_s = busy + t.bubble_s + t.exposed_s;
  t.tokens_per_s = static_cast<double>(tokens_per_step) / t.step_s;
  t.mfu = model_flops / (t.step_s * gpus * peak);
  return t;
}

}  // namespace dtrain::plan
