// ChatDataset: this rank's batches of packed conversations
// (data/chat_samples.h's rows), with the per-token positions a model needs
// to keep the samples of a row apart.
//
// Contract (TokenDataset's, with rows for windows):
// - kTraining: epoch e orders the rows by DistributedSampler's shuffle
//   (seed + e) with drop_last, so rank r takes positions r, r + world, ...
//   of the permutation and every rank the same number; batch b holds this
//   rank's rows [b*B, (b+1)*B), an incomplete last batch is dropped.
// - kValidation: rows in order, rank r takes rows r, r + world, ...; the
//   last batch may be short.
// - Batches are a pure function of (packing, options, epoch, batch index):
//   startEpoch(e, k) yields exactly batches k.. of an uninterrupted epoch.
// - A batch's positions [rows, seq_len] restart at 0 where each sample (and
//   the padding) starts; they are left undefined when every row of the
//   batch is one sample filling it, so the model runs its plain causal path.
// - CUDA: assembled in pinned memory, copied with non_blocking=true.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "data/chat_samples.h"
#include "data/distributed_sampler.h"
#include "data/token_dataset.h"  // TokenDataOptions, TokenPass

namespace dtrain::data {

struct ChatBatch {
  torch::Tensor inputs;     // int64 [rows, seq_len]
  torch::Tensor targets;    // int64 [rows, seq_len], kIgnoreTarget where the loss skips
  torch::Tensor positions;  // int64 [rows, seq_len], or undefined (see the contract)
  int64_t index = 0;
  int64_t rows = 0;
  int64_t trained = 0;      // targets that count (not kIgnoreTarget)
};

class ChatDataset {
 public:
  // ConfigError naming the option: seq_len other than the packing's,
  // batch_size < 1, a rank outside the world, CUDA without CUDA, no rows,
  // or (training) fewer rows than world_size x batch_size.
  ChatDataset(std::shared_ptr<const ChatPacking> packing, TokenDataOptions options);

  int64_t rowsPerEpoch() const;  // this rank's
  int64_t batchesPerEpoch() const;
  void startEpoch(int64_t epoch, int64_t first_batch = 0);
  std::optional<ChatBatch> next();
  std::string describe() const;

 private:
  std::vector<int64_t> rowOrder(int64_t epoch, int64_t first_batch) const;
  ChatBatch assemble(int64_t index, int64_t first_row, int64_t rows) const;

  std::shared_ptr<const ChatPacking> packing_;
  TokenDataOptions options_;
  DistributedSampler sampler_;
  bool pin_ = false;
  std::vector<int64_t> order_;
  int64_t first_batch_ = 0;
  int64_t delivered_ = 0;
};

}  // namespace dtrain::data
