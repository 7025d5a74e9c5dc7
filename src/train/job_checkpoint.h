// JobCheckpoint: what a `dtrain train` checkpoint holds, how a job writes
// one, and how it resumes from one (private to train/).
//
// Tensors: "model.param.<name>" (every parameter by its module path, e.g.
// "model.param.transformer.h.0.attn.c_attn.weight"), "model.buffer.<name>"
// (BatchNorm statistics, rank 0's), the optimizer's and the scaler's state
// (per slab), "rng.cpu" (the default CPU generator). Meta: step, epoch,
// batch (the next batch of that epoch), world_size, batch_size, model,
// dataset, optimizer, seed; a language model's "model_config" (the string
// pairs of models::languageModelMetadata) and, when it trained on the
// embedded corpus, "tokenizer" {kind, path}: what `dtrain generate` needs.
//
// Rank 0 writes checkpoints, and reads one and broadcasts it, so only rank 0
// needs the checkpoint directory. A checkpoint from a job with another world
// size or per-rank batch size resumes at the start of the next epoch (the
// order of samples inside an epoch depends on both), with a warning.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "dtrain/checkpoint.h"
#include "train/train_options.h"
#include "train/training_job.h"

namespace dtrain {

struct TrainPosition {
  int64_t epoch = 0;
  int64_t batch = 0;  // next batch within epoch
  int64_t step = 0;   // optimizer steps done
};

// The position after `batch` batches of `epoch` (rolls over to the next epoch).
TrainPosition nextPosition(int64_t epoch, int64_t batch, int64_t step, int64_t steps_per_epoch);

// What the checkpoint's meta names besides the position.
struct CheckpointIdentity {
  std::string model;
  std::string dataset;
  int64_t batch_size = 0;  // per rank
  uint64_t seed = 0;
  std::map<std::string, std::string> model_config;  // language models
  std::string tokenizer, tokenizer_path;            // language models on the embedded corpus
};

class JobCheckpoint {
 public:
  JobCheckpoint(TrainingJob& job, const CheckpointOptions& options, CheckpointIdentity identity);

  // Whether checkpoints are written at all (--checkpoint-dir given).
  bool enabled() const { return !options_.dir.empty(); }
  // Every rank: brings the buffers to rank 0's; rank 0 writes the
  // checkpoint of `position` atomically. Nothing when not enabled.
  void save(const TrainPosition& position);
  // Every rank: resolves --resume on rank 0 and restores every rank from it.
  // Returns where to go on from (step 0 when there is nothing to resume).
  // Rank 0's error (ConfigError for a bad checkpoint, IoError for one it
  // cannot read) is rethrown as it is on rank 0, and as the same kind on
  // the others.
  TrainPosition resume();

 private:
  // The checkpoint of rank 0, with the optimizer state every rank gathered.
  CheckpointState pack(const TrainPosition& position, std::map<std::string, torch::Tensor> model,
                       const std::map<std::string, torch::Tensor>& optimizer) const;
  // Every rank: rank 0's state from `found` (nullptr on the others), then
  // broadcast to all.
  void restore(const std::pair<std::string, CheckpointState>* found);

  TrainingJob& job_;
  CheckpointOptions options_;
  CheckpointIdentity identity_;
  std::unique_ptr<Checkpointer> checkpointer_;  // rank 0 only
};

}  // namespace dtrain
