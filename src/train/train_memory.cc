#include "train/train_memory.h"

#include <algorithm>

#include "models/fused_kernels_setting.h"
#include "models/lm_counts.h"
#include "parallel/parallel_plan.h"

namespace dtrain {

MemoryInputs lmMemoryInputs(const ModelSpec& model, const ParallelOptions& parallel, const ExecutionOptions& execution,
                            const OptimizerOptions& optimizer, int64_t batch_size,
                            const models::LanguageModelConfig& config, int ranks, bool cuda) {
  MemoryInputs in;
  in.lm = &config;
  in.parameters = models::parameterCount(config);
  in.tp = parallel.tp;
  in.ranks = std::max(1, ranks / (in.tp * parallel.pp));  // the data-parallel ranks
  in.sequence_parallel = in.tp > 1 && parallel.sequence_parallel;
  // Over one data-parallel rank sharding does nothing: the job runs unsharded (TrainingJob).
  in.shard = in.ranks / std::max(1, parallel.dp_replicate) > 1 ? parallel.shard : ShardStage::kNone;
  in.precision = execution.precision;
  in.reduce_dtype = parallel.reduce_dtype;
  in.optimizer_state_bytes = optimizerStateBytes(optimizer);
  in.bucket_mb = parallel.bucket_mb;
  in.tokens = batch_size * config.seq_len;
  in.activation_checkpointing = model.lm.activation_checkpointing;
  in.fused_head = cuda;
  // CUDA builds are of libtorch 2.x, whose SDPA takes grouped queries (2.5+).
  in.native_gqa = cuda && models::nativeGqaSetting();
  in.gpu = cuda;
  if (parallel.pp > 1) setPipeline(in, planParallelism(parallel, ranks, plannedModel(model)), batch_size);
  return in;
}

MemoryInputs lmMemoryInputs(const TrainOptions& o, const models::LanguageModelConfig& config, int ranks, bool cuda) {
  return lmMemoryInputs(o.model, o.parallel, o.execution, o.optimizer, o.data.batch_size, config, ranks, cuda);
}

}  // namespace dtrain
