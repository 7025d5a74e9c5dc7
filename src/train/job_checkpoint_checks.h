// What a `dtrain train` checkpoint says is checked before it is trusted:
// a file whose CRCs hold can still hold nonsense (a hand edit, another
// program's writer, a run that diverged before it saved). (private to
// train/)
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/types.h>

namespace dtrain {

// The fields of a `dtrain train` checkpoint's meta (job_checkpoint.h),
// each of its type and in the range the flags that made it allow.
struct TrainCheckpointMeta {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t batch = 0;       // the next batch of that epoch
  int64_t world_size = 0;  // 0: not in the meta
  int64_t batch_size = 0;  // per rank; 0: not in the meta
  std::string model, dataset, optimizer;
};

// Whether the fields a resume goes on from must all be there (step, epoch,
// batch, world_size, batch_size, model, optimizer: every dtrain has written
// them), or only those present are checked (the tools, which also read
// files a library Checkpointer wrote with a meta of its user's choosing).
enum class MetaFields { kPresentOnes, kAllForResume };

// Checks every field `meta` holds of those a `dtrain train` checkpoint
// writes (the ones above, seed, tensor_layout, model_config, tokenizer);
// fields it does not know are left alone. ConfigError naming `file` (the
// file that holds the meta) and the first bad field:
//   checkpoint F: field 'step': expected a non-negative integer (at most N), got "abc"
TrainCheckpointMeta checkTrainCheckpointMeta(const std::string& file, const nlohmann::json& meta, MetaFields fields);

// The flag of `dtrain train` (CheckpointOptions::allow_nonfinite).
inline constexpr const char* kAllowNonFiniteFlag = "--allow-nonfinite-checkpoint";

// Non-finite values (NaN, +-Inf) in what a restore reads, per tensor.
class NonFiniteTally {
 public:
  // Counts those in `values` (on the CPU; other dtypes than floating point
  // hold none) under `name`, adding to what that name had.
  void add(const std::string& name, const torch::Tensor& values);
  bool empty() const { return counts_.empty(); }
  // ConfigError naming `checkpoint`, the first tensor by name that has some
  // and how many, the number of others, and the flag that allows them;
  // with `allowed`, the same as a warning instead. Nothing when every value
  // was finite.
  void check(const std::string& checkpoint, bool allowed) const;

 private:
  std::map<std::string, int64_t> counts_;
};

}  // namespace dtrain
