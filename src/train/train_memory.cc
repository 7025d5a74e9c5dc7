#include "train/train_memory.h"

#include <algorithm>

#include "models/lm_counts.h"
#include "parallel/parallel_plan.h"

namespace dtrain {

MemoryInputs lmMemoryInputs(const TrainOptions& o, const models::LanguageModelConfig& config, int ranks, bool cuda) {
  MemoryInputs in;
  in.lm = &config;
  in.parameters = models::parameterCount(config);
  in.tp = o.parallel.tp;
  in.ranks = std::max(1, ranks / (in.tp * o.parallel.pp));  // the data-parallel ranks
  in.sequence_parallel = in.tp > 1 && o.parallel.sequence_parallel;
  // Over one data-parallel rank sharding does nothing: the job runs unsharded (TrainingJob).
  in.shard = in.ranks / std::max(1, o.parallel.dp_replicate) > 1 ? o.parallel.shard : ShardStage::kNone;
  in.precision = o.execution.precision;
  in.reduce_dtype = o.parallel.reduce_dtype;
  in.optimizer_state_bytes = optimizerStateBytes(o.optimizer);
  in.bucket_mb = o.parallel.bucket_mb;
  in.tokens = o.data.batch_size * config.seq_len;
  in.activation_checkpointing = o.model.lm.activation_checkpointing;
  in.fused_head = cuda;
  in.gpu = cuda;
  if (o.parallel.pp > 1) setPipeline(in, planParallelism(o.parallel, ranks, plannedModel(o.model)), o.data.batch_size);
  return in;
}

}  // namespace dtrain
