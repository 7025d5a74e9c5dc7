// Checkpoints: a map of named tensors plus JSON metadata in one file,
// written atomically, verified on load.
//
//   dtrain::Checkpointer ckpt({.dir = "ckpt", .keep = 3});
//   ckpt.save(step, {.tensors = {{"w", w}}, .meta = {{"epoch", 2}}});
//   if (auto latest = ckpt.loadLatestValid()) { ... latest->second.tensors ... }
//
// File format, version 1 (<dir>/<prefix>-<step, zero-padded to 9 digits>.dtck).
// Integers are little-endian; only little-endian hosts are supported (checked
// at compile time), so tensor bytes are the host's own.
//
//   offset 0   "DTRAINCK"                      8 bytes, magic
//          8   u32 format version (1)
//         12   u64 H, length of the header
//         20   header, H bytes of JSON:
//                {"meta": <CheckpointState::meta>,
//                 "tensors": [{"name", "dtype", "shape": [..], "offset", "bytes"}, ...]}
//              dtype: float32 float64 float16 bfloat16 int64 int32 int16 int8
//              uint8 bool. offset is relative to the data section; tensors
//              are packed in header order, with no gaps.
//     20 + H   data: each tensor's bytes, C-contiguous (row-major)
//   P = 20 + H + data length
//          P   u64 P (payload length: everything before the trailer)
//      P + 8   u32 CRC-32 (zlib crc32) of bytes [0, P)
//     P + 12   "DTCKEND\0"                     8 bytes, end magic
//
// loadCheckpoint() checks, in this order: magic, version, file size against
// the trailer (a short file reports "truncated: N bytes, expected M"), the
// CRC ("checksum mismatch"), then the header (known dtypes, unique names,
// each shape matching its byte length, the packing). Any failure is a
// ConfigError naming the file; an unreadable file is an IoError.
//
// Atomicity: save() writes a temporary ".<final name>.tmp-<host>-<pid>" in
// the same directory, fsyncs it, renames it over the final name and fsyncs
// the directory, so a crash at any point leaves either the previous set of
// checkpoints or the complete new file, never a partial file under a final
// name. Temporaries never match a final name, so readers ignore leftovers;
// the next successful save removes those of dead processes on this host.
// One Checkpointer must not save from two threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/types.h>

namespace dtrain {

struct CheckpointState {
  // Any dtype above, any device, strided (dense) layout; saved as contiguous
  // CPU bytes, loaded as contiguous CPU tensors.
  std::map<std::string, torch::Tensor> tensors;
  nlohmann::json meta = nlohmann::json::object();  // step, epoch, sampler position, config, ...
};

struct CheckpointerOptions {
  std::string dir;              // created if missing
  int keep = 3;                 // newest K kept after each save; > 0
  std::string prefix = "ckpt";  // non-empty, no '/', must not start with '.'
};

class Checkpointer {
 public:
  // Creates dir if missing (IoError naming it on failure); ConfigError for
  // keep <= 0, an empty dir or a bad prefix.
  explicit Checkpointer(CheckpointerOptions options);

  // Writes the checkpoint of `step` (>= 0) atomically, replacing one of the
  // same step, then prunes: the newest `keep` by step stay, and so does the
  // file just written even when older than `keep` others. Returns the final
  // path. ConfigError for a tensor it cannot store (undefined, sparse, other
  // dtype) or unserializable meta, before anything is written; IoError
  // naming the path and the OS reason (disk full, ...), with the temporary
  // removed.
  std::string save(int64_t step, const CheckpointState& state);
  // Final-named checkpoints in dir, newest (highest step) first; empty when
  // dir is gone. IoError when dir cannot be read.
  std::vector<std::string> list() const;
  // The newest checkpoint that verifies; each newer one that does not is
  // skipped with a warning naming it and why. nullopt when none is valid.
  std::optional<std::pair<std::string, CheckpointState>> loadLatestValid() const;
  const CheckpointerOptions& options() const { return options_; }

 private:
  CheckpointerOptions options_;
};

// Reads and verifies one checkpoint (ConfigError: malformed, naming the file
// and the problem; IoError: missing or unreadable).
CheckpointState loadCheckpoint(const std::string& path);

// --resume: "" or "none" -> nullopt; "auto" -> the newest valid checkpoint
// named <prefix>-*.dtck in dir (nullopt when dir is missing or holds none;
// ConfigError when dir is ""); otherwise a checkpoint file, which must load
// (its errors propagate; a directory is a ConfigError).
std::optional<std::pair<std::string, CheckpointState>> resolveResume(const std::string& resume,
                                                                      const std::string& dir,
                                                                      const std::string& prefix = "ckpt");

}  // namespace dtrain
