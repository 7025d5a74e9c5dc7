// CheckpointReader (include/dtrain/checkpoint.h): logical tensors of a
// checkpoint file or a sharded checkpoint, read range by range.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "checkpoint/checkpoint_file_writer.h"
#include "checkpoint/checkpoint_sharded.h"
#include "common/error.h"
#include "common/files.h"
#include "common/text.h"
#include "dtrain/checkpoint.h"

namespace dtrain {
namespace {

// A run of one tensor in one shard.
struct Run {
  size_t shard = 0;
  int64_t begin = 0;
  int64_t count = 0;
  int64_t offset = 0;  // of its first element in the shard file's tensor
};

std::string crcText(uint32_t crc) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", crc);
  return text;
}

}  // namespace

int64_t CheckpointTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

struct CheckpointReader::Impl {
  std::string path;
  bool sharded = false;
  int world_size = 1;
  std::string stage;
  nlohmann::json meta;
  std::vector<CheckpointTensorInfo> tensors;
  std::map<std::string, std::string> aliases;
  std::map<std::string, size_t> index;  // name -> tensors[]
  std::unique_ptr<CheckpointFile> file;  // a single file
  // A sharded checkpoint: its metadata, each tensor's runs by begin, the
  // shards opened so far.
  ShardedMetadata metadata;
  std::map<std::string, std::vector<Run>> runs;
  std::vector<std::unique_ptr<CheckpointFile>> shards;

  void openFile();
  void openSharded();
  const CheckpointFile& shard(size_t i);
  const CheckpointTensorInfo& info(const std::string& name) const;
};

void CheckpointReader::Impl::openFile() {
  file = std::make_unique<CheckpointFile>(path);
  meta = file->meta();
  for (const CheckpointFileEntry& e : file->entries()) tensors.push_back({e.name, torchDtypeOf(e.dtype), e.shape, {}});
}

void CheckpointReader::Impl::openSharded() {
  sharded = true;
  struct stat st {};
  if (::stat((path + "/" + kShardedMetadataFile).c_str(), &st) != 0) {
    throw ConfigError("checkpoint " + path + " is incomplete: " + joined(missingCheckpointParts(path)));
  }
  metadata = readShardedMetadata(path);
  const std::vector<std::string> missing = missingShards(path, metadata);
  if (!missing.empty()) {
    throw ConfigError("checkpoint " + path + " is damaged: " + joined(missing) + " (its " + kShardedMetadataFile +
                      " says the write finished)");
  }
  meta = metadata.meta;
  world_size = metadata.world_size;
  stage = metadata.stage;
  aliases = metadata.aliases;
  tensors = metadata.tensors;
  for (size_t s = 0; s < metadata.shards.size(); ++s) {
    std::map<std::string, int64_t> held;  // elements of each tensor this shard's earlier ranges hold
    for (const ShardRange& r : metadata.shards[s].ranges) {
      runs[r.tensor].push_back({s, r.begin, r.count, held[r.tensor]});
      held[r.tensor] += r.count;
    }
  }
  for (auto& [name, list] : runs) {
    std::sort(list.begin(), list.end(), [](const Run& a, const Run& b) { return a.begin < b.begin; });
  }
  shards.resize(metadata.shards.size());
}

// Opens shard i on first use and checks it is the one the metadata names.
const CheckpointFile& CheckpointReader::Impl::shard(size_t i) {
  if (shards[i]) return *shards[i];
  const ShardFile& expected = metadata.shards[i];
  auto opened = std::make_unique<CheckpointFile>(path + "/" + expected.file);
  const std::string& where = opened->path();
  if (opened->size() != expected.bytes || opened->storedCrc() != expected.crc) {
    throw ConfigError(where + " has " + std::to_string(opened->size()) + " bytes and CRC " +
                      crcText(opened->storedCrc()) + ", but the metadata names " + std::to_string(expected.bytes) +
                      " bytes and CRC " + crcText(expected.crc) + " (a shard of another write?)");
  }
  std::map<std::string, int64_t> held;
  for (const ShardRange& r : expected.ranges) held[r.tensor] += r.count;
  for (const auto& [name, count] : held) {
    const CheckpointFileEntry* entry = opened->find(name);
    const CheckpointTensorInfo& t = info(name);
    if (entry == nullptr) throw ConfigError(where + " holds no '" + name + "', which the metadata places there");
    if (torchDtypeOf(entry->dtype) != t.dtype || entry->shape != std::vector<int64_t>{count}) {
      throw ConfigError(where + ": '" + name + "' is " + nlohmann::json(entry->shape).dump() + " " +
                        c10::toString(torchDtypeOf(entry->dtype)) + ", but the metadata says [" +
                        std::to_string(count) + "] " + c10::toString(t.dtype));
    }
  }
  shards[i] = std::move(opened);
  return *shards[i];
}

const CheckpointTensorInfo& CheckpointReader::Impl::info(const std::string& name) const {
  auto alias = aliases.find(name);
  auto it = index.find(alias == aliases.end() ? name : alias->second);
  if (it == index.end()) throw ConfigError("checkpoint " + path + " has no tensor '" + name + "'");
  return tensors[it->second];
}

CheckpointReader::CheckpointReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = checkpointLocation(path);
  if (isDirectory(impl_->path)) {
    if (!isShardedCheckpointDir(impl_->path)) {
      throw ConfigError(impl_->path + " is a directory but no sharded checkpoint (it holds no " +
                        kShardedMetadataFile + " and no rank-*.dtck shard)");
    }
    impl_->openSharded();
  } else {
    impl_->openFile();
  }
  std::sort(impl_->tensors.begin(), impl_->tensors.end(),
            [](const CheckpointTensorInfo& a, const CheckpointTensorInfo& b) { return a.name < b.name; });
  for (size_t i = 0; i < impl_->tensors.size(); ++i) impl_->index[impl_->tensors[i].name] = i;
}

CheckpointReader::~CheckpointReader() = default;

const std::string& CheckpointReader::path() const { return impl_->path; }
bool CheckpointReader::sharded() const { return impl_->sharded; }
int CheckpointReader::worldSize() const { return impl_->world_size; }
const std::string& CheckpointReader::stage() const { return impl_->stage; }
const nlohmann::json& CheckpointReader::meta() const { return impl_->meta; }
const std::vector<CheckpointTensorInfo>& CheckpointReader::tensors() const { return impl_->tensors; }
const std::map<std::string, std::string>& CheckpointReader::aliases() const { return impl_->aliases; }

const CheckpointTensorInfo* CheckpointReader::find(const std::string& name) const {
  auto alias = impl_->aliases.find(name);
  auto it = impl_->index.find(alias == impl_->aliases.end() ? name : alias->second);
  return it == impl_->index.end() ? nullptr : &impl_->tensors[it->second];
}

std::vector<std::pair<std::string, uint64_t>> CheckpointReader::files() const {
  if (!impl_->sharded) return {{impl_->path, impl_->file->size()}};
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const ShardFile& s : impl_->metadata.shards) out.emplace_back(impl_->path + "/" + s.file, s.bytes);
  const std::string metadata = impl_->path + "/" + kShardedMetadataFile;
  struct stat st {};
  out.emplace_back(metadata, ::stat(metadata.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0);
  return out;
}

void CheckpointReader::verifyFile(size_t i) const {
  if (!impl_->sharded) {
    impl_->file->verify();
  } else if (i < impl_->shards.size()) {
    impl_->shard(i).verify();
  } else {
    CheckpointFile(impl_->path + "/" + kShardedMetadataFile).verify();
  }
}

void CheckpointReader::verify() const {
  const size_t count = impl_->sharded ? impl_->shards.size() + 1 : 1;
  for (size_t i = 0; i < count; ++i) verifyFile(i);
}

void CheckpointReader::read(const std::string& name, int64_t begin, int64_t count, void* out) const {
  const CheckpointTensorInfo& t = impl_->info(name);
  if (begin < 0 || count < 0 || begin + count > t.numel()) {
    throw ConfigError("checkpoint " + impl_->path + ": elements [" + std::to_string(begin) + ", " +
                      std::to_string(begin + count) + ") of '" + t.name + "', which has " + std::to_string(t.numel()));
  }
  if (count == 0) return;
  const int64_t element = static_cast<int64_t>(c10::elementSize(t.dtype));
  auto* dst = static_cast<char*>(out);
  if (!impl_->sharded) {
    impl_->file->read(impl_->file->find(t.name)->offset + static_cast<uint64_t>(begin * element), dst,
                      static_cast<size_t>(count * element));
    return;
  }
  // The runs tile the tensor (the metadata was checked): walk those that overlap.
  const std::vector<Run>& runs = impl_->runs.at(t.name);
  auto run = std::upper_bound(runs.begin(), runs.end(), begin, [](int64_t at, const Run& r) { return at < r.begin; });
  for (--run; count > 0; ++run) {
    const int64_t n = std::min(count, run->begin + run->count - begin);
    const CheckpointFile& file = impl_->shard(run->shard);
    file.read(file.find(t.name)->offset + static_cast<uint64_t>((run->offset + begin - run->begin) * element), dst,
              static_cast<size_t>(n * element));
    dst += n * element;
    begin += n;
    count -= n;
  }
}

torch::Tensor CheckpointReader::readTensor(const std::string& name) const {
  const CheckpointTensorInfo& t = impl_->info(name);
  std::vector<int64_t> stored = t.shape;
  for (size_t d = 0; d < t.storage_order.size(); ++d) stored[d] = t.shape[static_cast<size_t>(t.storage_order[d])];
  torch::Tensor out = torch::empty(stored, torch::TensorOptions().dtype(t.dtype));
  if (out.numel() > 0) read(t.name, 0, t.numel(), out.data_ptr());
  if (t.storage_order.empty()) return out;
  std::vector<int64_t> inverse(t.storage_order.size());
  for (size_t d = 0; d < t.storage_order.size(); ++d) inverse[static_cast<size_t>(t.storage_order[d])] = static_cast<int64_t>(d);
  return out.permute(inverse).contiguous();
}

}  // namespace dtrain
