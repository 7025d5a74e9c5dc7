// JobCheckpoint: what a `dtrain train` checkpoint holds, how a job writes
// one, and how it resumes from one (private to train/).
//
// Every rank writes its shard of a sharded checkpoint
// (include/dtrain/checkpoint.h; job_checkpoint_layout.h says which
// tensors and ranges), in parallel, into <dir>/ckpt-<step>/; once every
// shard is durable rank 0 writes metadata.dtck, which makes the checkpoint
// complete, and prunes to --keep whole checkpoints. Meta: step, epoch,
// batch (the next batch of that epoch), world_size, batch_size, model,
// dataset, optimizer, seed, tensor_layout "parameters"; a language model's
// "model_config" (the string pairs of models::languageModelMetadata) and,
// when its tokenizer is known (the embedded corpus's, the flags', the token
// shards' own), "tokenizer" {kind, path}: what `dtrain generate` needs.
// A LoRA run's checkpoint holds its adapters
// alone (and their optimizer state), not the frozen base, and its meta
// "lora" {rank, alpha, targets, init_from} names the base: the absolute
// --init-from directory, or "" for the fresh weights of the meta's seed.
// Resuming it needs a job of the same adapters over the same base.
//
// A pipeline's stages hold different tensors: each stage lays out its own
// (its ranks as a world of their own), and rank 0 writes the union into
// the metadata, a tensor held by two stages (a tied head) or written by
// each (the optimizer's step count) from the first of them; so a
// checkpoint of any (pp, tp, dp) loads into any other.
//
// Resuming reads a sharded checkpoint of any world size and stage, a
// single file of the same tensors (`dtrain checkpoint consolidate`), or a
// single file of the slab layout older dtrains wrote (rank 0 reads that
// one and broadcasts it). The others need a file system every rank sees:
// each rank checks the CRCs of its share of the files, then reads the
// ranges it holds. A checkpoint from a job with another world size or
// per-rank batch size resumes at the start of the next epoch (the order of
// samples inside an epoch depends on both), with a warning.
#pragma once

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dtrain/checkpoint.h"
#include "checkpoint/checkpoint_sharded.h"
#include "train/job_checkpoint_layout.h"
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
  std::string tokenizer, tokenizer_path;            // language models whose tokenizer is known
  std::map<std::string, std::string> lora;          // LoRA runs (see above); empty otherwise
};

struct TrainCheckpointMeta;

class JobCheckpoint {
 public:
  JobCheckpoint(TrainingJob& job, const CheckpointOptions& options, CheckpointIdentity identity);

  // Whether checkpoints are written at all (--checkpoint-dir given).
  bool enabled() const { return !options_.dir.empty(); }
  // Every rank: brings the buffers to rank 0's and writes its shard of the
  // checkpoint of `position`; rank 0 then its metadata. Nothing when not
  // enabled, or when this job saved (or resumed from) that very
  // checkpoint and has not stepped since. A rank's failure (IoError naming
  // the file and the OS reason) is thrown on it as it is, and as an
  // IoError naming that rank on the others.
  void save(const TrainPosition& position);
  // Every rank: resolves --resume (on rank 0), checks the checkpoint's
  // files (spread over the ranks) and restores every rank from it. Returns
  // where to go on from (step 0 when there is nothing to resume). With
  // auto, an incomplete or corrupt checkpoint is skipped with a warning
  // for the next older one; one that a rank cannot read at all (not on a
  // file system every rank sees?) is an IoError. A failing rank's error (ConfigError for a bad
  // checkpoint, IoError for one it cannot read) is rethrown as it is on
  // that rank, and as the same kind on the others. The meta is checked
  // field by field (checkpoint/meta_checks.h; auto skips a bad one like a
  // corrupt one) and against this job: another --model or --optimizer is
  // a ConfigError, as are NaN/Inf values in what the ranks read unless
  // options.allow_nonfinite.
  TrainPosition resume();
  // The job's state as logical tensors, which save() and resume() write
  // and read (also what --init-from's share is read into).
  CheckpointLayout& layout();

 private:
  struct Candidate;
  nlohmann::json meta(const TrainPosition& position) const;
  void prepareDirectory(const std::string& path);
  std::vector<std::vector<double>> writeShard(const std::string& path, int64_t step);
  // With a pipeline, each stage's part of the metadata (its layout's
  // tensors, aliases and its ranks' ranges), from the stage's first rank
  // to every rank; without, this rank's alone (a collective with --pp > 1).
  std::vector<ShardedMetadata> stageLayouts();
  void writeMetadata(const std::string& path, const TrainPosition& position,
                     const std::vector<std::vector<double>>& written, const std::vector<ShardedMetadata>& stages);
  Candidate pick(const std::vector<int64_t>& rejected, std::optional<CheckpointState>& slab_state) const;
  Candidate agree(const Candidate& mine) const;
  std::exception_ptr mismatchWithThisJob(const std::string& meta_file, const TrainCheckpointMeta& meta) const;
  bool loadVerified(const std::string& path, bool may_skip);

  TrainingJob& job_;
  CheckpointOptions options_;
  CheckpointIdentity identity_;
  std::unique_ptr<CheckpointLayout> layout_;
  int64_t saved_step_ = -1;    // the step this job saved last, while it has not stepped since
  std::string resumed_path_;   // the checkpoint it resumed from
  std::set<std::string> invalid_paths_;  // checkpoints resume() found corrupt
  int64_t resumed_step_ = -1;
};

}  // namespace dtrain
