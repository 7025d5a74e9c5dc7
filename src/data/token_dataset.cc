#include "data/token_dataset.h"

#include <torch/cuda.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/error.h"

namespace dtrain::data {

namespace {

// Checks the options and the source; returns the number of windows.
int64_t checkedWindowCount(const TokenSource* source, const TokenDataOptions& o) {
  if (source == nullptr) throw ConfigError("token data: no token source given");
  if (o.seq_len < 1) throw ConfigError("token data: seq_len is " + std::to_string(o.seq_len) + "; expected >= 1");
  if (o.batch_size < 1) {
    throw ConfigError("token data: batch_size is " + std::to_string(o.batch_size) + "; expected >= 1");
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    throw ConfigError("token data: rank " + std::to_string(o.rank) + " is not in [0, " +
                      std::to_string(o.world_size) + ") for a world of " + std::to_string(o.world_size));
  }
  if (o.device.is_cuda() && !torch::cuda::is_available()) {
    throw ConfigError("token data: device is " + o.device.str() + " but CUDA is not available");
  }
  const int64_t tokens = source->size();
  const int64_t windows = tokens > 0 ? (tokens - 1) / o.seq_len : 0;
  const std::string of_tokens = " of seq_len + 1 = " + std::to_string(o.seq_len + 1) + " tokens";
  if (windows == 0) {
    throw ConfigError("token data: " + source->describe() + " holds " + std::to_string(tokens) +
                      " tokens; expected at least one window" + of_tokens);
  }
  const int64_t needed = o.world_size * o.batch_size;
  if (o.pass == TokenPass::kTraining && windows < needed) {
    throw ConfigError("token data: " + source->describe() + " holds " + std::to_string(windows) + " windows" +
                      of_tokens + "; expected at least world_size " + std::to_string(o.world_size) +
                      " x batch_size " + std::to_string(o.batch_size) + " = " + std::to_string(needed) +
                      " windows so that every rank gets a full batch");
  }
  return windows;
}

}  // namespace

TokenDataset::TokenDataset(std::shared_ptr<const TokenSource> source, TokenDataOptions options)
    : source_(std::move(source)),
      options_(std::move(options)),
      window_count_(checkedWindowCount(source_.get(), options_)),
      sampler_(window_count_, options_.world_size, options_.rank, /*shuffle=*/true, options_.seed,
               /*drop_last=*/true),
      pin_(options_.device.is_cuda() && options_.pin_memory && torch::cuda::is_available()) {}

int64_t TokenDataset::windowsPerEpoch() const {
  if (options_.pass == TokenPass::kTraining) return sampler_.num_samples();
  const int64_t world = options_.world_size, rank = options_.rank;
  return rank < window_count_ ? (window_count_ - rank + world - 1) / world : 0;
}

int64_t TokenDataset::batchesPerEpoch() const {
  const int64_t windows = windowsPerEpoch(), rows = options_.batch_size;
  return options_.pass == TokenPass::kTraining ? windows / rows : (windows + rows - 1) / rows;
}

std::vector<int64_t> TokenDataset::windowOrder(int64_t epoch, int64_t first_batch) const {
  if (epoch < 0) throw ConfigError("token data: epoch is " + std::to_string(epoch) + "; expected >= 0");
  const int64_t batches = batchesPerEpoch();
  if (first_batch < 0 || first_batch > batches) {
    throw ConfigError("token data: first batch is " + std::to_string(first_batch) + "; expected 0.." +
                      std::to_string(batches) + " (batches per epoch)");
  }
  const int64_t first = first_batch * options_.batch_size;
  if (options_.pass == TokenPass::kValidation) {
    std::vector<int64_t> order;
    for (int64_t k = first; k < windowsPerEpoch(); ++k) order.push_back(options_.rank + k * options_.world_size);
    return order;
  }
  DistributedSampler sampler = sampler_;
  sampler.set_epoch(epoch);
  std::vector<int64_t> order = sampler.indices(first);
  // Training batches are whole: the sampler's tail short of a batch is cut.
  order.resize(static_cast<size_t>((batches - first_batch) * options_.batch_size));
  return order;
}

void TokenDataset::startEpoch(int64_t epoch, int64_t first_batch) {
  order_ = windowOrder(epoch, first_batch);
  first_batch_ = first_batch;
  delivered_ = 0;
}

std::optional<TokenBatch> TokenDataset::next() {
  const int64_t first_row = delivered_ * options_.batch_size;
  const auto total = static_cast<int64_t>(order_.size());
  if (first_row >= total) return std::nullopt;
  TokenBatch batch = assemble(first_batch_ + delivered_, first_row, std::min(options_.batch_size, total - first_row));
  ++delivered_;
  if (!options_.device.is_cpu()) {
    // From pinned memory this only queues the copy on the current stream.
    batch.inputs = batch.inputs.to(options_.device, /*non_blocking=*/pin_);
    batch.targets = batch.targets.to(options_.device, /*non_blocking=*/pin_);
  }
  return batch;
}

TokenBatch TokenDataset::assemble(int64_t index, int64_t first_row, int64_t rows) const {
  const int64_t seq = options_.seq_len;
  const auto host = torch::TensorOptions().dtype(torch::kLong).pinned_memory(pin_);
  TokenBatch batch{torch::empty({rows, seq}, host), torch::empty({rows, seq}, host), index, rows};
  int64_t* inputs = batch.inputs.data_ptr<int64_t>();
  int64_t* targets = batch.targets.data_ptr<int64_t>();
  std::vector<int64_t> window(static_cast<size_t>(seq + 1));
  for (int64_t r = 0; r < rows; ++r) {
    source_->copyTokens(order_[static_cast<size_t>(first_row + r)] * seq, seq + 1, window.data());
    std::memcpy(inputs + r * seq, window.data(), static_cast<size_t>(seq) * sizeof(int64_t));
    std::memcpy(targets + r * seq, window.data() + 1, static_cast<size_t>(seq) * sizeof(int64_t));
  }
  return batch;
}

std::string TokenDataset::describe() const {
  return "seq_len " + std::to_string(options_.seq_len) + ", " + std::to_string(options_.batch_size) +
         " rows per batch, " + std::to_string(batchesPerEpoch()) + " batches per epoch on rank " +
         std::to_string(options_.rank);
}

}  // namespace dtrain::data
