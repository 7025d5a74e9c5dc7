// The sharded checkpoint directory (the format is documented in
// include/dtrain/checkpoint.h): file names, the metadata that makes a
// checkpoint complete, what a half-written one lacks, listing and pruning
// a checkpoint directory that holds both kinds. (private to checkpoint/ and train/)
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "checkpoint/meta_checks.h"  // kParameterLayout
#include "dtrain/checkpoint.h"

namespace dtrain {

inline constexpr const char* kShardedMetadataFile = "metadata.dtck";
inline constexpr const char* kShardedFormat = "dtrain-sharded-checkpoint";
// "rank-00001-of-00002.dtck".
std::string shardFileName(int rank, int world_size);

// A logical tensor: a parameter, one parameter's optimizer state, a whole
// small tensor; CheckpointTensorInfo (dtrain/checkpoint.h), whose
// `storage_order` lists its dimensions outermost first as they lie in the
// files: a channels-last weight is stored as permute(storage_order).
using LogicalTensor = CheckpointTensorInfo;

// Elements [begin, begin + count) of a logical tensor (in its storage order),
// held by one shard file in a 1-D tensor of that name. A file that holds
// several ranges of one tensor (a tensor-parallel part of q, k and v rows)
// holds them one after the other in that tensor, in the order its
// ShardFile lists them.
struct ShardRange {
  std::string tensor;
  int64_t begin = 0;
  int64_t count = 0;
};

struct ShardFile {
  std::string file;  // name inside the checkpoint directory
  uint64_t bytes = 0;
  uint32_t crc = 0;
  std::vector<ShardRange> ranges;
};

struct ShardedMetadata {
  nlohmann::json meta = nlohmann::json::object();  // the job's: step, epoch, model_config, ...
  int world_size = 0;                              // ranks that wrote it (one shard each)
  std::string stage;                               // --shard of the job that wrote it
  std::vector<LogicalTensor> tensors;              // name order
  std::map<std::string, std::string> aliases;      // another name -> the tensor it names (tied weights)
  std::vector<ShardFile> shards;                   // rank order
};

// The metadata as the JSON meta of metadata.dtck, and back. parse checks
// everything a reader relies on (known dtypes, one shard per rank under its
// name, ranges inside their tensors that tile each tensor exactly) and
// throws ConfigError naming `path` and the first problem.
nlohmann::json metadataJson(const ShardedMetadata& metadata);
ShardedMetadata parseShardedMetadata(const std::string& path, const nlohmann::json& json);
// Writes <dir>/metadata.dtck atomically (checksummed like any checkpoint file).
void writeShardedMetadata(const std::string& dir, const ShardedMetadata& metadata);
// Reads and checks <dir>/metadata.dtck (CRC included).
ShardedMetadata readShardedMetadata(const std::string& dir);

// Whether `path` is a sharded checkpoint directory: it holds metadata.dtck
// or a shard file.
bool isShardedCheckpointDir(const std::string& path);
// (missingCheckpointParts, declared in dtrain/checkpoint.h, lives in the .cc.)
// The part of it for a checkpoint whose metadata was read: the shards
// missing or of another size.
std::vector<std::string> missingShards(const std::string& dir, const ShardedMetadata& metadata);

// "<prefix>-<step, 9 digits>" (a sharded checkpoint's directory; a single
// file adds ".dtck"); the step of such a name or -1.
std::string checkpointStem(const std::string& prefix, int64_t step);
int64_t checkpointStepOf(const std::string& name, const std::string& prefix);

// Final-named checkpoints in dir (files and sharded directories, complete
// or not), newest step first, a directory before a file of the same step.
// Empty when dir is missing; IoError when it cannot be read.
std::vector<std::string> listCheckpointPaths(const std::string& dir, const std::string& prefix);

// After `written` was saved: keeps the newest `keep` valid checkpoints
// and `written` (even when older), and removes the other valid ones, the incomplete ones
// older than `written` (writes that died: only one job writes a
// directory), and the corrupt ones (headers that do not read as a
// checkpoint, or in `known_invalid`: failed their CRCs on resume) older
// than every valid one kept; also temporaries dead processes of this host
// left. Invalid checkpoints never take one of the `keep` places. Failures
// are warnings.
void pruneCheckpoints(const std::string& dir, const std::string& prefix, int keep, const std::string& written,
                      const std::set<std::string>& known_invalid = {});

// In a sharded checkpoint's directory about to be rewritten by
// `world_size` ranks: removes the shards of other world sizes and the
// temporaries dead processes of this host left.
void removeStaleShards(const std::string& dir, int world_size);

// rm -r (no std::filesystem: see checkpoint.cc); 0 or the first errno.
int removeTree(const std::string& path);

}  // namespace dtrain
