#include "checkpoint/checkpoint_sharded.h"

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <set>
#include <tuple>

#include "checkpoint/checkpoint_file_writer.h"
#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "dtrain/checkpoint.h"

namespace dtrain {
namespace {

constexpr int kMetadataVersion = 1;

std::string join(const std::string& dir, const std::string& name) { return dir + "/" + name; }

// The names in dir; empty when it does not exist. IoError otherwise.
std::vector<std::string> namesIn(const std::string& dir) {
  std::vector<std::string> names;
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) {
    if (errno == ENOENT || errno == ENOTDIR) return names;
    throw errnoError("opendir", errno, "cannot list checkpoint directory '" + dir + "'");
  }
  while (const dirent* entry = ::readdir(handle)) names.emplace_back(entry->d_name);
  ::closedir(handle);
  return names;
}

int64_t fileSize(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return -1;
  return static_cast<int64_t>(st.st_size);
}

// The rank and world size of a shard file's name, or false.
bool parseShardName(const std::string& name, int& rank, int& world) {
  char tail = 0;
  return std::sscanf(name.c_str(), "rank-%5d-of-%5d.dtc%c", &rank, &world, &tail) == 3 && tail == 'k' &&
         shardFileName(rank, world) == name && rank >= 0 && rank < world;
}

LogicalTensor parseTensor(const std::string& where, const nlohmann::json& t) {
  LogicalTensor tensor;
  tensor.name = t.at("name").get<std::string>();
  const auto dtype = checkpointDtypeFromName(t.at("dtype").get<std::string>());
  if (!dtype) throw ConfigError(where + ": tensor '" + tensor.name + "' has unknown dtype " + t.at("dtype").dump());
  tensor.dtype = torchDtypeOf(*dtype);
  tensor.shape = t.at("shape").get<std::vector<int64_t>>();
  for (int64_t d : tensor.shape) {
    if (d < 0) throw ConfigError(where + ": tensor '" + tensor.name + "' has an invalid shape " + t.at("shape").dump());
  }
  if (t.contains("storage_order")) {
    tensor.storage_order = t.at("storage_order").get<std::vector<int64_t>>();
    std::vector<int64_t> sorted = tensor.storage_order;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
      if (sorted.size() != tensor.shape.size() || sorted[i] != static_cast<int64_t>(i)) {
        throw ConfigError(where + ": tensor '" + tensor.name + "' has a storage order " +
                          t.at("storage_order").dump() + " that is no permutation of its " +
                          std::to_string(tensor.shape.size()) + " dimensions");
      }
    }
  }
  return tensor;
}

// Every tensor's ranges, over all shards, must tile it: no gap, no overlap.
void checkTiling(const std::string& where, const ShardedMetadata& md) {
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> spans;
  std::map<std::string, const LogicalTensor*> by_name;
  for (const LogicalTensor& t : md.tensors) by_name[t.name] = &t;
  for (const ShardFile& shard : md.shards) {
    for (const ShardRange& r : shard.ranges) {
      auto it = by_name.find(r.tensor);
      if (it == by_name.end()) {
        throw ConfigError(where + ": " + shard.file + " holds a range of '" + r.tensor + "', a tensor it does not list");
      }
      if (r.begin < 0 || r.count <= 0 || r.begin + r.count > it->second->numel()) {
        throw ConfigError(where + ": " + shard.file + " holds elements [" + std::to_string(r.begin) + ", " +
                          std::to_string(r.begin + r.count) + ") of '" + r.tensor + "', which has " +
                          std::to_string(it->second->numel()));
      }
      spans[r.tensor].emplace_back(r.begin, r.begin + r.count);
    }
  }
  for (const LogicalTensor& t : md.tensors) {
    auto& list = spans[t.name];
    std::sort(list.begin(), list.end());
    int64_t covered = 0;
    for (const auto& [begin, end] : list) {
      if (begin != covered) {
        throw ConfigError(where + ": elements [" + std::to_string(std::min(begin, covered)) + ", " +
                          std::to_string(std::max(begin, covered)) + ") of '" + t.name + "' are " +
                          (begin > covered ? "in no shard" : "in two shards"));
      }
      covered = end;
    }
    if (covered != t.numel()) {
      throw ConfigError(where + ": elements [" + std::to_string(covered) + ", " + std::to_string(t.numel()) + ") of '" +
                        t.name + "' are in no shard");
    }
  }
}

int removeEntry(const char* path, const struct stat*, int type, struct FTW*) {
  return type == FTW_DP ? ::rmdir(path) : ::unlink(path);
}

}  // namespace

std::string shardFileName(int rank, int world_size) {
  char name[64];
  std::snprintf(name, sizeof(name), "rank-%05d-of-%05d.dtck", rank, world_size);
  return name;
}

nlohmann::json metadataJson(const ShardedMetadata& md) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const LogicalTensor& t : md.tensors) {
    nlohmann::json entry = {{"name", t.name}, {"dtype", checkpointDtypeName(t.dtype)}, {"shape", t.shape}};
    if (!t.storage_order.empty()) entry["storage_order"] = t.storage_order;
    tensors.push_back(std::move(entry));
  }
  nlohmann::json shards = nlohmann::json::array();
  for (const ShardFile& s : md.shards) {
    nlohmann::json ranges = nlohmann::json::array();
    for (const ShardRange& r : s.ranges) ranges.push_back({r.tensor, r.begin, r.count});
    shards.push_back({{"file", s.file}, {"bytes", s.bytes}, {"crc32", s.crc}, {"ranges", std::move(ranges)}});
  }
  return {{"format", kShardedFormat}, {"version", kMetadataVersion}, {"meta", md.meta},
          {"world_size", md.world_size}, {"stage", md.stage}, {"tensors", std::move(tensors)},
          {"aliases", md.aliases}, {"shards", std::move(shards)}};
}

ShardedMetadata parseShardedMetadata(const std::string& path, const nlohmann::json& json) {
  ShardedMetadata md;
  try {
    if (json.value("format", std::string()) != kShardedFormat) {
      throw ConfigError(path + " is not the metadata of a sharded checkpoint (its \"format\" is " +
                        (json.contains("format") ? json["format"].dump() : std::string("missing")) + ")");
    }
    if (json.at("version").get<int>() != kMetadataVersion) {
      throw ConfigError(path + " has sharded-checkpoint version " + json.at("version").dump() + "; this dtrain reads " +
                        std::to_string(kMetadataVersion));
    }
    md.meta = json.at("meta");
    md.world_size = json.at("world_size").get<int>();
    md.stage = json.at("stage").get<std::string>();
    std::set<std::string> names;
    for (const auto& t : json.at("tensors")) {
      md.tensors.push_back(parseTensor(path, t));
      if (!names.insert(md.tensors.back().name).second) {
        throw ConfigError(path + ": tensor '" + md.tensors.back().name + "' appears twice");
      }
    }
    md.aliases = json.at("aliases").get<std::map<std::string, std::string>>();
    for (const auto& [alias, target] : md.aliases) {
      if (!names.count(target) || names.count(alias)) {
        throw ConfigError(path + ": alias '" + alias + "' names '" + target + "', which is no other tensor");
      }
    }
    for (const auto& s : json.at("shards")) {
      ShardFile shard{s.at("file").get<std::string>(), s.at("bytes").get<uint64_t>(), s.at("crc32").get<uint32_t>(), {}};
      for (const auto& r : s.at("ranges")) {
        shard.ranges.push_back({r.at(0).get<std::string>(), r.at(1).get<int64_t>(), r.at(2).get<int64_t>()});
      }
      md.shards.push_back(std::move(shard));
    }
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(path + ": malformed sharded-checkpoint metadata (" + e.what() + ")");
  }
  if (md.world_size < 1 || md.shards.size() != static_cast<size_t>(md.world_size)) {
    throw ConfigError(path + ": " + std::to_string(md.shards.size()) + " shard(s) for a world size of " +
                      std::to_string(md.world_size));
  }
  for (int r = 0; r < md.world_size; ++r) {
    const std::string expected = shardFileName(r, md.world_size);
    if (md.shards[static_cast<size_t>(r)].file != expected) {
      throw ConfigError(path + ": shard " + std::to_string(r) + " is named '" + md.shards[static_cast<size_t>(r)].file +
                        "', expected '" + expected + "'");
    }
  }
  checkTiling(path, md);
  return md;
}

void writeShardedMetadata(const std::string& dir, const ShardedMetadata& metadata) {
  writeCheckpointFile(join(dir, kShardedMetadataFile), metadataJson(metadata), {});
}

ShardedMetadata readShardedMetadata(const std::string& dir) {
  const std::string path = join(dir, kShardedMetadataFile);
  const CheckpointFile file(path);
  file.verify();
  return parseShardedMetadata(path, file.meta());
}

bool isShardedCheckpointDir(const std::string& path) {
  if (!isDirectory(path)) return false;
  if (fileSize(join(path, kShardedMetadataFile)) >= 0) return true;
  int rank = 0, world = 0;
  for (const std::string& name : namesIn(path)) {
    if (parseShardName(name, rank, world)) return true;
  }
  return false;
}

std::vector<std::string> missingCheckpointParts(const std::string& dir) {
  std::vector<std::string> missing;
  if (fileSize(join(dir, kShardedMetadataFile)) < 0) {
    // The shards there tell the world size (the largest one named).
    int world = 0, rank = 0, of = 0;
    std::set<int> present;
    for (const std::string& name : namesIn(dir)) {
      if (parseShardName(name, rank, of)) world = std::max(world, of);
    }
    for (const std::string& name : namesIn(dir)) {
      if (parseShardName(name, rank, of) && of == world) present.insert(rank);
    }
    missing.push_back(std::string(kShardedMetadataFile) + " missing");
    for (int r = 0; r < world; ++r) {
      if (!present.count(r)) missing.push_back(shardFileName(r, world) + " missing");
    }
    return missing;
  }
  // The metadata is written last, once every shard is in place: a present
  // one says the write finished. What fails to verify from here on (the
  // metadata itself, a shard missing or of another size) is damage, found
  // by whoever reads the checkpoint, never an unfinished write.
  return missing;
}

std::vector<std::string> missingShards(const std::string& dir, const ShardedMetadata& md) {
  std::vector<std::string> missing;
  for (const ShardFile& shard : md.shards) {
    const int64_t size = fileSize(join(dir, shard.file));
    if (size < 0) {
      missing.push_back(shard.file + " missing");
    } else if (static_cast<uint64_t>(size) != shard.bytes) {
      missing.push_back(shard.file + " has " + std::to_string(size) + " bytes, expected " + std::to_string(shard.bytes));
    }
  }
  return missing;
}

std::string checkpointStem(const std::string& prefix, int64_t step) {
  char digits[32];
  std::snprintf(digits, sizeof(digits), "%09lld", static_cast<long long>(step));
  return prefix + "-" + digits;
}

int64_t checkpointStepOf(const std::string& name, const std::string& prefix) {
  const std::string head = prefix + "-";
  std::string stem = name;
  if (stem.ends_with(".dtck")) stem.resize(stem.size() - 5);
  if (stem.size() <= head.size() || stem.size() > head.size() + 18 || stem.compare(0, head.size(), head) != 0) {
    return -1;
  }
  const std::string digits = stem.substr(head.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return -1;
  const int64_t step = std::stoll(digits);
  return checkpointStem(prefix, step) == stem ? step : -1;
}

std::vector<std::string> listCheckpointPaths(const std::string& dir, const std::string& prefix) {
  // (step, is a file, path): newest first, a directory before a file.
  std::vector<std::tuple<int64_t, bool, std::string>> found;
  for (const std::string& name : namesIn(dir)) {
    const int64_t step = checkpointStepOf(name, prefix);
    if (step < 0) continue;
    const std::string path = join(dir, name);
    const bool file = name.ends_with(".dtck");
    if (file ? fileSize(path) >= 0 : isDirectory(path)) found.emplace_back(step, file, path);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return std::get<0>(a) != std::get<0>(b) ? std::get<0>(a) > std::get<0>(b) : std::get<1>(a) < std::get<1>(b);
  });
  std::vector<std::string> paths;
  for (auto& item : found) paths.push_back(std::move(std::get<2>(item)));
  return paths;
}

namespace {

// Whether a complete checkpoint's headers (a file's, or a sharded one's
// metadata) read as a checkpoint: truncated or overwritten files are
// caught, not flipped bits (the CRCs are checked on resume).
bool readsAsACheckpoint(const std::string& path) {
  try {
    CheckpointReader reader(path);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

void pruneCheckpoints(const std::string& dir, const std::string& prefix, int keep, const std::string& written,
                      const std::set<std::string>& known_invalid) {
  const int64_t written_step = checkpointStepOf(written.substr(written.rfind('/') + 1), prefix);
  struct Found {
    std::string path;
    int64_t step;
    bool complete, good;
  };
  std::vector<Found> found;
  int64_t oldest_kept = written_step;
  int valid = 0;
  for (const std::string& path : listCheckpointPaths(dir, prefix)) {  // newest first
    const int64_t step = checkpointStepOf(path.substr(path.rfind('/') + 1), prefix);
    const bool complete = !isDirectory(path) || missingCheckpointParts(path).empty();
    const bool good = path == written || (complete && known_invalid.count(path) == 0 && readsAsACheckpoint(path));
    // Only valid checkpoints take one of the `keep` places (`written` always
    // stays, even when older than `keep` others).
    if (good && (++valid <= keep || path == written)) oldest_kept = std::min(oldest_kept, step);
    found.push_back({path, step, complete, good});
  }
  valid = 0;
  for (const Found& f : found) {
    if (f.good) ++valid;
    if (f.path == written) continue;
    // Valid: beyond the newest `keep`. Incomplete (a write that died, only
    // one job writes a directory): older than the one just written. Corrupt:
    // older than every valid one kept, so never the one to resume from.
    const bool remove = f.good ? valid > keep : !f.complete ? f.step < written_step : f.step < oldest_kept;
    if (!remove) continue;
    const int err = isDirectory(f.path) ? removeTree(f.path) : (::unlink(f.path.c_str()) == 0 ? 0 : errno);
    if (err != 0 && err != ENOENT) DTRAIN_LOG_WARN("cannot remove old checkpoint " << f.path << ": " << errnoString(err));
  }
  removeDeadCheckpointTemporaries(dir, prefix + "-");
}

void removeStaleShards(const std::string& dir, int world_size) {
  int rank = 0, world = 0;
  for (const std::string& name : namesIn(dir)) {
    if (parseShardName(name, rank, world) && world != world_size) ::unlink(join(dir, name).c_str());
  }
  removeDeadCheckpointTemporaries(dir, "rank-");
}

int removeTree(const std::string& path) {
  if (::nftw(path.c_str(), removeEntry, 16, FTW_DEPTH | FTW_PHYS) != 0) return errno != 0 ? errno : EIO;
  return 0;
}


}  // namespace dtrain
