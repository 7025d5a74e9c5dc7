// One checkpoint file (.dtck, the format include/dtrain/checkpoint.h
// documents), read without libtorch: a reader that reads any byte range of
// any tensor with pread, so that it never holds more than one tensor (or
// one chunk of it) in memory, the dtypes the format names, and the
// temporaries an atomic write leaves (checkpoint_file_writer.h writes
// tensors). Single-file checkpoints, the shards of a sharded checkpoint and
// its metadata are all such files. Tests and tools that only read
// checkpoints link this (dtrain_checkpoint_format) without libtorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtrain {

// The element types the format stores, by their names in it.
enum class CheckpointDtype { kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kInt16, kInt8, kUInt8, kBool };

// "float32", "bfloat16", ...
const char* checkpointDtypeName(CheckpointDtype dtype);
// The dtype of a name in the format; nullopt for an unknown name.
std::optional<CheckpointDtype> checkpointDtypeFromName(const std::string& name);
// Bytes per element.
size_t checkpointDtypeSize(CheckpointDtype dtype);

struct WrittenFile {
  uint64_t bytes = 0;  // the whole file
  uint32_t crc = 0;    // the trailer's CRC-32
};

// Where temporaries of `final_name` live: ".<final_name>.tmp-<host>-<pid>".
std::string checkpointTemporaryName(const std::string& final_name);
// Removes, in dir, the temporaries whose names start with ".<stem>" that
// processes of this host which no longer run left behind.
void removeDeadCheckpointTemporaries(const std::string& dir, const std::string& stem);

struct CheckpointFileEntry {
  std::string name;
  CheckpointDtype dtype = CheckpointDtype::kFloat32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // of its first byte, from the start of the file
  uint64_t bytes = 0;
  int64_t numel() const;
};

// An open checkpoint file whose preamble, size, trailer and header were
// checked (not yet its CRC: verify() does that in one streaming pass).
// Errors are ConfigErrors naming the file and what was expected (a
// truncated file gives both sizes; a header that does not parse is
// reported as a checksum mismatch when the CRC fails too), IoErrors when
// it cannot be read.
class CheckpointFile {
 public:
  explicit CheckpointFile(const std::string& path);
  ~CheckpointFile();
  CheckpointFile(const CheckpointFile&) = delete;
  CheckpointFile& operator=(const CheckpointFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  uint32_t storedCrc() const { return stored_crc_; }
  const nlohmann::json& meta() const { return meta_; }
  const std::vector<CheckpointFileEntry>& entries() const { return entries_; }
  // The entry of that name, or nullptr.
  const CheckpointFileEntry* find(const std::string& name) const;

  // Bytes [offset, offset + size) of the file (pread; IoError if it shrank).
  void read(uint64_t offset, void* out, size_t size) const;
  // CRC-32 of the payload against the trailer ("checksum mismatch").
  void verify() const;
  // Reads every tensor, in file order, into the memory `storage` returns
  // for it (entry.bytes bytes), checking the CRC in the same pass (a
  // "checksum mismatch" ConfigError once the last one was read).
  void readAll(const std::function<void*(const CheckpointFileEntry&)>& storage) const;

 private:
  void checkTrailer(uint64_t header_bytes);
  uint32_t crcOf(uint64_t begin, uint64_t end, uint32_t crc) const;

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t payload_ = 0;
  uint64_t data_begin_ = 0;
  uint32_t stored_crc_ = 0;
  nlohmann::json meta_;
  std::vector<CheckpointFileEntry> entries_;
};

}  // namespace dtrain
