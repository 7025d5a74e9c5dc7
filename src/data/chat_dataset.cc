#include "data/chat_dataset.h"

#include <torch/cuda.h>

#include <algorithm>

#include "common/error.h"

namespace dtrain::data {
namespace {

int64_t checkedRowCount(const ChatPacking* packing, const TokenDataOptions& o) {
  if (packing == nullptr) throw ConfigError("chat data: no packed samples given");
  if (o.seq_len != packing->seq_len) {
    throw ConfigError("chat data: seq_len is " + std::to_string(o.seq_len) + " but the samples were packed into " +
                      std::to_string(packing->seq_len));
  }
  if (o.batch_size < 1) {
    throw ConfigError("chat data: batch_size is " + std::to_string(o.batch_size) + "; expected >= 1");
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    throw ConfigError("chat data: rank " + std::to_string(o.rank) + " is not in [0, " + std::to_string(o.world_size) +
                      ")");
  }
  if (o.device.is_cuda() && !torch::cuda::is_available()) {
    throw ConfigError("chat data: device is " + o.device.str() + " but CUDA is not available");
  }
  const int64_t rows = packing->rowCount();
  if (rows == 0) throw ConfigError("chat data: no samples (every record was bad or held out)");
  const int64_t needed = o.world_size * o.batch_size;
  if (o.pass == TokenPass::kTraining && rows < needed) {
    throw ConfigError("chat data: the samples pack into " + std::to_string(rows) + " rows of --seq-len " +
                      std::to_string(o.seq_len) + "; expected at least " + std::to_string(o.world_size) +
                      " ranks x --batch-size " + std::to_string(o.batch_size) + " = " + std::to_string(needed) +
                      " so that every rank gets a full batch");
  }
  return rows;
}

}  // namespace

ChatDataset::ChatDataset(std::shared_ptr<const ChatPacking> packing, TokenDataOptions options)
    : packing_(std::move(packing)),
      options_(std::move(options)),
      sampler_(checkedRowCount(packing_.get(), options_), options_.world_size, options_.rank, /*shuffle=*/true,
               options_.seed, /*drop_last=*/true),
      pin_(options_.device.is_cuda() && options_.pin_memory && torch::cuda::is_available()) {}

int64_t ChatDataset::rowsPerEpoch() const {
  if (options_.pass == TokenPass::kTraining) return sampler_.num_samples();
  const int64_t rows = packing_->rowCount(), world = options_.world_size, rank = options_.rank;
  return rank < rows ? (rows - rank + world - 1) / world : 0;
}

int64_t ChatDataset::batchesPerEpoch() const {
  const int64_t rows = rowsPerEpoch(), b = options_.batch_size;
  return options_.pass == TokenPass::kTraining ? rows / b : (rows + b - 1) / b;
}

std::vector<int64_t> ChatDataset::rowOrder(int64_t epoch, int64_t first_batch) const {
  const int64_t batches = batchesPerEpoch();
  if (epoch < 0 || first_batch < 0 || first_batch > batches) {
    throw ConfigError("chat data: epoch " + std::to_string(epoch) + ", first batch " + std::to_string(first_batch) +
                      "; expected epoch >= 0 and a batch in 0.." + std::to_string(batches));
  }
  const int64_t first = first_batch * options_.batch_size;
  std::vector<int64_t> order;
  if (options_.pass == TokenPass::kValidation) {
    for (int64_t k = first; k < rowsPerEpoch(); ++k) order.push_back(options_.rank + k * options_.world_size);
    return order;
  }
  DistributedSampler sampler = sampler_;
  sampler.set_epoch(epoch);
  order = sampler.indices(first);
  order.resize(static_cast<size_t>((batches - first_batch) * options_.batch_size));
  return order;
}

void ChatDataset::startEpoch(int64_t epoch, int64_t first_batch) {
  order_ = rowOrder(epoch, first_batch);
  first_batch_ = first_batch;
  delivered_ = 0;
}

std::optional<ChatBatch> ChatDataset::next() {
  const int64_t first_row = delivered_ * options_.batch_size;
  const auto total = static_cast<int64_t>(order_.size());
  if (first_row >= total) return std::nullopt;
  ChatBatch batch = assemble(first_batch_ + delivered_, first_row, std::min(options_.batch_size, total - first_row));
  ++delivered_;
  if (!options_.device.is_cpu()) {
    batch.inputs = batch.inputs.to(options_.device, /*non_blocking=*/pin_);
    batch.targets = batch.targets.to(options_.device, /*non_blocking=*/pin_);
    if (batch.positions.defined()) batch.positions = batch.positions.to(options_.device, /*non_blocking=*/pin_);
  }
  return batch;
}

ChatBatch ChatDataset::assemble(int64_t index, int64_t first_row, int64_t rows) const {
  const int64_t seq = options_.seq_len;
  const auto host = torch::TensorOptions().dtype(torch::kLong).pinned_memory(pin_);
  ChatBatch batch{torch::empty({rows, seq}, host), torch::empty({rows, seq}, host), torch::empty({rows, seq}, host),
                  index, rows, 0};
  int64_t* inputs = batch.inputs.data_ptr<int64_t>();
  int64_t* targets = batch.targets.data_ptr<int64_t>();
  int64_t* positions = batch.positions.data_ptr<int64_t>();
  bool one_document_each = true;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = order_[static_cast<size_t>(first_row + r)];
    packing_->writeRow(row, inputs + r * seq, targets + r * seq, positions + r * seq);
    one_document_each = one_document_each && packing_->singleDocument(row);
  }
  batch.trained = std::count_if(targets, targets + rows * seq, [](int64_t t) { return t != kIgnoreTarget; });
  if (one_document_each) batch.positions = torch::Tensor();
  return batch;
}

std::string ChatDataset::describe() const {
  return "seq_len " + std::to_string(options_.seq_len) + ", " + std::to_string(options_.batch_size) +
         " rows per batch, " + std::to_string(batchesPerEpoch()) + " batches per epoch on rank " +
         std::to_string(options_.rank);
}

}  // namespace dtrain::data
