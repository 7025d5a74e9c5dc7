// Checkpoints: named tensors plus JSON metadata, written atomically,
// verified on load; one file, or a directory of shards that any number of
// ranks write in parallel and any other number read back.
//
//   dtrain::Checkpointer ckpt({.dir = "ckpt", .keep = 3});
//   ckpt.save(step, {.tensors = {{"w", w}}, .meta = {{"epoch", 2}}});
//   if (auto latest = ckpt.loadLatestValid()) { ... latest->second.tensors ... }
//
//   dtrain::CheckpointReader reader("ckpt/ckpt-000000100");   // either kind
//   reader.verify();
//   torch::Tensor w = reader.readTensor("model.param.fc.weight");
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
// Atomicity: a file is written as a temporary ".<final name>.tmp-<host>-<pid>"
// in the same directory, fsynced, renamed over the final name, and the
// directory fsynced, so a crash at any point leaves either the previous set
// of checkpoints or the complete new file, never a partial file under a
// final name. Temporaries never match a final name, so readers ignore
// leftovers; the next successful save removes those of dead processes on
// this host. One Checkpointer must not save from two threads at once.
//
// Sharded checkpoints (what `dtrain train` writes: docs/checkpoints.md) are
// a directory <dir>/<prefix>-<step, 9 digits>/ holding
//   rank-<r, 5 digits>-of-<N, 5 digits>.dtck   one per rank r of the N that
//                                              wrote it, in the file format
//   metadata.dtck                              the same format, no tensors
// The tensors are logical: "model.param.<name>" (one per parameter, its
// master values), "optimizer.<opt>.<state>.<name>" (that parameter's
// optimizer state), and whole small tensors (step counts, the loss
// scaler, "rng.cpu", "model.buffer.<name>"). A shard holds, under a
// tensor's name, one 1-D run of it: elements [begin, begin + count) in
// storage order (row-major, unless the tensor's storage_order says its
// dimensions lie permuted, as a channels-last weight's do). metadata.dtck's
// meta is
//   {"format": "dtrain-sharded-checkpoint", "version": 1,
//    "meta": {step, epoch, ..., "tensor_layout": "parameters"},
//    "world_size": N, "stage": "none|optimizer|gradients|full",
//    "tensors": [{"name", "dtype", "shape", "storage_order"?}, ...],
//    "aliases": {"<name>": "<the tensor it names>", ...},
//    "shards": [{"file", "bytes", "crc32", "ranges": [[tensor, begin, count], ...]}, ...]}
// and the ranges of each tensor tile it exactly. Rank 0 writes it last,
// once every shard is durable, so a checkpoint is complete exactly when
// metadata.dtck is there and every shard it names has its size; a reader
// also checks each shard's CRC against the metadata's, so a shard left
// from another write is never mixed in. Every rank that loads one reads
// the ranges it needs from whichever shards hold them: sharded checkpoints
// need a file system that every rank sees (as PyTorch's DCP does).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
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

  // Writes the checkpoint of `step` (>= 0) atomically as one file,
  // replacing one of the same step, then prunes: the newest `keep` complete
  // checkpoints by step stay (files and sharded directories alike), and so
  // does the file just written even when older than `keep` others;
  // incomplete sharded ones older than it go. Returns the final path.
  // ConfigError for a tensor it cannot store (undefined, sparse, other
  // dtype) or unserializable meta, before anything is written; IoError
  // naming the path and the OS reason (disk full, ...), with the temporary
  // removed.
  std::string save(int64_t step, const CheckpointState& state);
  // Final-named checkpoints in dir (files and sharded directories, complete
  // or not), newest (highest step) first; empty when dir is gone. IoError
  // when dir cannot be read.
  std::vector<std::string> list() const;
  // The newest checkpoint that is complete and verifies, loaded whole; each
  // newer one that does not is skipped with a warning naming it and why (a
  // sharded one: the files it lacks). nullopt when none is valid.
  std::optional<std::pair<std::string, CheckpointState>> loadLatestValid() const;
  const CheckpointerOptions& options() const { return options_; }

 private:
  CheckpointerOptions options_;
};

// Reads and verifies one checkpoint whole (ConfigError: malformed or
// incomplete, naming the file and the problem; IoError: missing or
// unreadable). A sharded checkpoint (its directory or its metadata.dtck)
// is assembled into its logical tensors, an alias under each of its names:
// meant for small models and tests, not for state larger than memory
// (CheckpointReader reads ranges).
CheckpointState loadCheckpoint(const std::string& path);

// Why the sharded checkpoint in `path` is incomplete — its write was cut
// short: metadata.dtck, written last, is missing — one phrase per file
// ("metadata.dtck missing", "rank-00001-of-00002.dtck missing"); empty when
// it is complete, or when `path` is a file. Once metadata.dtck is there,
// every file must verify: a metadata file that fails its checksum, or a
// shard missing or of another size than the metadata says, is damage that
// reading the checkpoint reports (ConfigError naming the file), never a
// reason to treat the checkpoint as unfinished.
std::vector<std::string> missingCheckpointParts(const std::string& path);

// The newest complete checkpoint in dir (files and sharded directories
// named <prefix>-<step>), without reading its tensors or verifying it;
// each newer incomplete one is skipped with a warning that names what it
// lacks ("ckpt-000000100: rank-00001-of-00002.dtck missing; skipped").
// Steps in `skip` are passed over silently. nullopt when there is none.
std::optional<std::string> newestCompleteCheckpoint(const std::string& dir, const std::string& prefix = "ckpt",
                                                    const std::vector<int64_t>& skip = {});

// A sharded checkpoint's directory for `path` when it names one (the
// directory or its metadata.dtck), else `path` unchanged.
std::string checkpointLocation(const std::string& path);

// --resume: "" or "none" -> nullopt; "auto" -> the newest valid checkpoint
// named <prefix>-* in dir (nullopt when dir is missing or holds none;
// ConfigError when dir is ""); otherwise a checkpoint file or a sharded
// checkpoint (its directory or metadata.dtck), which must load (its
// errors propagate; any other directory is a ConfigError). Loads whole,
// as loadCheckpoint does.
std::optional<std::pair<std::string, CheckpointState>> resolveResume(const std::string& resume,
                                                                      const std::string& dir,
                                                                      const std::string& prefix = "ckpt");

// A logical tensor of a checkpoint: its dtype and shape, and
// `storage_order` (empty: row-major): the order of its dimensions in the
// files, outermost first (its values lie as permute(storage_order)).
struct CheckpointTensorInfo {
  std::string name;
  torch::ScalarType dtype = torch::kFloat;
  std::vector<int64_t> shape;
  std::vector<int64_t> storage_order;
  int64_t numel() const;
};

// Any checkpoint, file or sharded, as logical tensors read range by range
// with pread: memory holds what is read, never the whole state.
// Construction reads the headers (the metadata, and each shard's when
// first read from, checked against the metadata: its size, CRC and the
// ranges it holds), not the data; verify() checks the CRCs in one
// streaming pass per file. Errors are ConfigErrors naming the file and
// what was expected (an incomplete checkpoint names what it lacks),
// IoErrors for files that cannot be read. Not thread-safe.
class CheckpointReader {
 public:
  // A checkpoint file, or a sharded checkpoint's directory or its metadata.dtck.
  explicit CheckpointReader(const std::string& path);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& path() const;  // the file, or the sharded checkpoint's directory
  bool sharded() const;
  // Sharded: the ranks that wrote it and their --shard stage; a file: 1, "".
  int worldSize() const;
  const std::string& stage() const;
  const nlohmann::json& meta() const;
  // Every logical tensor, by name; aliases (a tied weight's other names)
  // are not listed but find() and read() accept them.
  const std::vector<CheckpointTensorInfo>& tensors() const;
  const std::map<std::string, std::string>& aliases() const;
  const CheckpointTensorInfo* find(const std::string& name) const;
  // The files it consists of (a sharded one: its shards in rank order,
  // then metadata.dtck), and their sizes.
  std::vector<std::pair<std::string, uint64_t>> files() const;

  // The CRC of files()[i], in one streaming pass; verify() checks them all.
  void verifyFile(size_t i) const;
  void verify() const;
  // Elements [begin, begin + count) of tensor `name` in its storage order,
  // into `out` (count x its element size bytes of host memory).
  void read(const std::string& name, int64_t begin, int64_t count, void* out) const;
  // The whole tensor on the CPU, in its shape (row-major).
  torch::Tensor readTensor(const std::string& name) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain
