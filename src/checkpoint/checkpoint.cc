#include "dtrain/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>

#include "checkpoint/checkpoint_file_writer.h"
#include "checkpoint/checkpoint_sharded.h"
#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "common/text.h"

// std::filesystem is not used here: PyTorch's 2.x wheels export their own
// copy of it from libtorch.so, which binds first and crashes (remove_all).

namespace dtrain {
namespace {

std::string baseName(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// A sharded checkpoint assembled whole: every tensor, and each alias as a
// tensor of its own (the single-file layout, where a tied weight is saved
// under each name).
CheckpointState loadSharded(const std::string& dir) {
  const CheckpointReader reader(dir);
  reader.verify();
  CheckpointState state;
  state.meta = reader.meta();
  for (const CheckpointTensorInfo& t : reader.tensors()) state.tensors[t.name] = reader.readTensor(t.name);
  for (const auto& [alias, target] : reader.aliases()) state.tensors[alias] = state.tensors.at(target);
  return state;
}

std::optional<std::pair<std::string, CheckpointState>> loadLatestValidIn(const std::string& dir,
                                                                          const std::string& prefix) {
  std::vector<int64_t> rejected;
  while (auto path = newestCompleteCheckpoint(dir, prefix, rejected)) {
    try {
      return std::make_pair(*path, loadCheckpoint(*path));
    } catch (const Error& e) {
      DTRAIN_LOG_WARN("skipping an invalid checkpoint: " << e.message());
      rejected.push_back(checkpointStepOf(baseName(*path), prefix));
    }
  }
  return std::nullopt;
}

}  // namespace

std::string checkpointLocation(const std::string& path) {
  std::string location = path;
  while (location.size() > 1 && location.back() == '/') location.pop_back();
  if (baseName(location) == kShardedMetadataFile) {
    const size_t slash = location.rfind('/');
    return slash == std::string::npos ? "." : location.substr(0, std::max<size_t>(slash, 1));
  }
  return location;
}

CheckpointState loadCheckpoint(const std::string& path) {
  const std::string location = checkpointLocation(path);
  if (isDirectory(location) && isShardedCheckpointDir(location)) return loadSharded(location);
  const CheckpointFile file(location);
  CheckpointState state;
  for (auto& [name, tensor] : readAllTensors(file)) state.tensors.emplace(name, std::move(tensor));
  state.meta = file.meta();
  return state;
}

std::optional<std::string> newestCompleteCheckpoint(const std::string& dir, const std::string& prefix,
                                                    const std::vector<int64_t>& skip) {
  for (const std::string& path : listCheckpointPaths(dir, prefix)) {
    if (std::find(skip.begin(), skip.end(), checkpointStepOf(baseName(path), prefix)) != skip.end()) continue;
    if (!isDirectory(path)) return path;
    const std::vector<std::string> missing = missingCheckpointParts(path);
    if (missing.empty()) return path;
    DTRAIN_LOG_WARN(baseName(path) << ": " << joined(missing) << "; skipped (an incomplete checkpoint: its write "
                                   << "did not finish)");
  }
  return std::nullopt;
}

Checkpointer::Checkpointer(CheckpointerOptions options) : options_(std::move(options)) {
  if (options_.keep <= 0) {
    throw ConfigError("checkpoints to keep must be > 0, got " + std::to_string(options_.keep));
  }
  if (options_.dir.empty()) throw ConfigError("checkpoint directory is empty");
  const std::string& prefix = options_.prefix;
  if (prefix.empty() || prefix[0] == '.' || prefix.find('/') != std::string::npos) {
    throw ConfigError("checkpoint prefix '" + prefix + "' must be non-empty, have no '/' and not start with '.'");
  }
  if (const int err = makeDirectories(options_.dir)) {
    throw errnoError("mkdir", err, "cannot create checkpoint directory '" + options_.dir + "'");
  }
}

std::string Checkpointer::save(int64_t step, const CheckpointState& state) {
  if (step < 0) throw ConfigError("checkpoint step must be >= 0, got " + std::to_string(step));
  std::vector<TensorToWrite> tensors;
  for (const auto& [key, tensor] : state.tensors) {
    if (!tensor.defined()) throw ConfigError("checkpoint tensor '" + key + "' is undefined");
    if (tensor.layout() != torch::kStrided) {
      throw ConfigError("checkpoint tensor '" + key + "' is not dense (sparse or other layout); checkpoints cannot store it");
    }
    const torch::Tensor& t = tensor;
    tensors.push_back({key, tensor.scalar_type(), tensor.sizes().vec(), [&t] { return t; }});
  }
  const std::string final_path = options_.dir + "/" + checkpointStem(options_.prefix, step) + ".dtck";
  writeCheckpointFile(final_path, state.meta, tensors);
  pruneCheckpoints(options_.dir, options_.prefix, options_.keep, final_path);
  return final_path;
}

std::vector<std::string> Checkpointer::list() const { return listCheckpointPaths(options_.dir, options_.prefix); }

std::optional<std::pair<std::string, CheckpointState>> Checkpointer::loadLatestValid() const {
  return loadLatestValidIn(options_.dir, options_.prefix);
}

std::optional<std::pair<std::string, CheckpointState>> resolveResume(const std::string& resume,
                                                                      const std::string& dir,
                                                                      const std::string& prefix) {
  if (resume.empty() || resume == "none") return std::nullopt;
  if (resume == "auto") {
    if (dir.empty()) throw ConfigError("resume 'auto' needs a checkpoint directory");
    return loadLatestValidIn(dir, prefix);
  }
  return std::make_pair(checkpointLocation(resume), loadCheckpoint(resume));
}

}  // namespace dtrain
