// What a `dtrain train` checkpoint's meta says is checked before it is
// trusted: a file whose CRCs hold can still hold nonsense (a hand edit,
// another program's writer, a run that diverged before it saved). Used by
// the resume (train/) and the checkpoint tools. Torch-free.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace dtrain {

// Bounds of `dtrain train`'s flags (train_options.h declares them with
// these); a checkpoint's meta is held to the same ones.
inline constexpr int64_t kMaxBatch = int64_t{1} << 20;
inline constexpr int64_t kMaxEpochs = 1'000'000;
inline constexpr int64_t kMaxSteps = int64_t{1} << 40;

// meta["tensor_layout"] of checkpoints whose tensors are per parameter
// (sharded ones and their consolidation); older single files hold the
// optimizer state per slab and have no such key.
inline constexpr const char* kParameterLayout = "parameters";

// The fields of a `dtrain train` checkpoint's meta (job_checkpoint.h),
// each of its type and in the range the flags that made it allow.
struct TrainCheckpointMeta {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t batch = 0;       // the next batch of that epoch
  int64_t world_size = 0;  // 0: not in the meta
  int64_t data_ranks = 0;  // the data-parallel ranks (world_size / tp); 0: not in the meta (= world_size)
  int64_t batch_size = 0;  // per rank; 0: not in the meta
  std::string model, dataset, optimizer;
  // A LoRA run's adapters and base (job_checkpoint.h); empty otherwise.
  std::map<std::string, std::string> lora;
};

// Whether the fields a resume goes on from must all be there (step, epoch,
// batch, world_size, batch_size, model, optimizer: every dtrain has written
// them), or only those present are checked (the tools, which also read
// files a library Checkpointer wrote with a meta of its user's choosing).
enum class MetaFields { kPresentOnes, kAllForResume };

// Checks every field `meta` holds of those a `dtrain train` checkpoint
// writes (the ones above, seed, tensor_layout, model_config, lora, tokenizer);
// fields it does not know are left alone. ConfigError naming `file` (the
// file that holds the meta) and the first bad field:
//   checkpoint F: field 'step': expected a non-negative integer (at most N), got "abc"
TrainCheckpointMeta checkTrainCheckpointMeta(const std::string& file, const nlohmann::json& meta, MetaFields fields);

}  // namespace dtrain
