// TokenDataset: this rank's language-model batches, windows of seq_len + 1
// tokens cut from a TokenSource (token shards or synthetic tokens).
//
// Contract:
// - Window w covers tokens [w * seq_len, w * seq_len + seq_len + 1): the
//   inputs are its first seq_len tokens, the targets its last seq_len (the
//   inputs shifted by one). Consecutive windows share one token, so every
//   token but the first is a target exactly once per epoch. There are
//   windowCount() = (tokens - 1) / seq_len windows; a tail too short for a
//   window is never read.
// - kTraining: epoch e orders all windows by DistributedSampler's shuffle
//   (seed + e) with drop_last, so rank r takes positions r, r + world, ...
//   of the permutation, no window is read by two ranks and every rank reads
//   the same number. Batch b holds this rank's windows [b*B, (b+1)*B); an
//   incomplete last batch is dropped, so every batch has batch_size rows.
// - kValidation: windows in file order, never shuffled; rank r takes
//   windows r, r + world, ..., so every window is read exactly once across
//   the ranks (ranks may differ by one window); the last batch may be short.
//   The epoch does not matter.
// - Batches are a pure function of (source, options, epoch, batch index):
//   startEpoch(e, k) yields exactly batches k.. of an uninterrupted epoch e.
// - CUDA device: batches are assembled in pinned host memory (pin_memory and
//   CUDA available) and copied with non_blocking=true on the caller's
//   current stream. The shards are memory-mapped, so assembly is a copy and
//   needs no background threads.
// - Not thread-safe: one consumer calls startEpoch() and next().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "data/distributed_sampler.h"
#include "data/token_source.h"

namespace dtrain::data {

enum class TokenPass { kTraining, kValidation };

struct TokenDataOptions {
  int64_t seq_len = 1024;   // tokens a row predicts, >= 1
  int64_t batch_size = 8;   // rows (windows) per batch on this rank, >= 1
  uint64_t seed = 0;        // training shuffle
  int64_t rank = 0;
  int64_t world_size = 1;
  TokenPass pass = TokenPass::kTraining;
  torch::Device device = torch::kCPU;
  bool pin_memory = true;   // CUDA device only
};

struct TokenBatch {
  torch::Tensor inputs;   // int64 [rows, seq_len] on the device
  torch::Tensor targets;  // int64 [rows, seq_len]: inputs shifted by one token
  int64_t index = 0;      // batch number within the epoch, 0-based
  int64_t rows = 0;       // batch_size, except a short last validation batch
};

class TokenDataset {
 public:
  // ConfigError naming the option or the data: seq_len or batch_size < 1,
  // rank not in [0, world_size), a CUDA device without CUDA, a source
  // shorter than one window, or (training) fewer windows than
  // world_size * batch_size, which leaves a rank without a full batch.
  TokenDataset(std::shared_ptr<const TokenSource> source, TokenDataOptions options);

  const TokenDataOptions& options() const { return options_; }
  int64_t windowCount() const { return window_count_; }  // all ranks together
  int64_t windowsPerEpoch() const;                        // this rank's, in whole batches or not
  int64_t batchesPerEpoch() const;
  // This rank's window indices of `epoch`, in delivery order, from batch
  // first_batch on (0 <= first_batch <= batchesPerEpoch(), else ConfigError).
  std::vector<int64_t> windowOrder(int64_t epoch, int64_t first_batch = 0) const;

  // Starts epoch `epoch` at batch first_batch (see windowOrder).
  void startEpoch(int64_t epoch, int64_t first_batch = 0);
  // The epoch's next batch; nullopt at its end (and before any startEpoch).
  std::optional<TokenBatch> next();

  // "seq_len 1024, 8 rows per batch, 1234 batches per epoch on rank 0"
  // (the source describes itself).
  std::string describe() const;

 private:
  TokenBatch assemble(int64_t index, int64_t first_row, int64_t rows) const;

  std::shared_ptr<const TokenSource> source_;
  TokenDataOptions options_;
  int64_t window_count_ = 0;
  DistributedSampler sampler_;  // the training order; unused in validation
  bool pin_ = false;
  std::vector<int64_t> order_;  // this epoch's windows from batch first_batch_ on
  int64_t first_batch_ = 0;
  int64_t delivered_ = 0;       // batches delivered since startEpoch
};

}  // namespace dtrain::data
