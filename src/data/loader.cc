#include "data/loader.h"

#include <algorithm>

#include "common/error.h"
#include "data/distributed_sampler.h"
#include "data/transforms.h"

namespace dtrain::data {

DataLoader::DataLoader(ImageDataset dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  if (options_.batch_size <= 0) {
    throw ConfigError("--batch-size must be > 0, got " + std::to_string(options_.batch_size));
  }
  if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size) {
    throw ConfigError("loader rank " + std::to_string(options_.rank) + " is not in a world of " +
                      std::to_string(options_.world_size));
  }
  if (dataset_.size() == 0) throw ConfigError("the data set is empty");
  if (dataset_.size() < options_.world_size) {
    throw ConfigError("the data set has " + std::to_string(dataset_.size()) + " samples but the job has " +
                      std::to_string(options_.world_size) + " ranks; expected at least one sample per rank");
  }
  if (dataset_.images.dim() != 4 || dataset_.images.scalar_type() != torch::kByte) {
    throw ConfigError("loader: images must be uint8 [N, C, H, W]");
  }
  const int64_t channels = dataset_.images.size(1);
  if (options_.mean.size() != options_.std.size() ||
      (!options_.mean.empty() && static_cast<int64_t>(options_.mean.size()) != channels)) {
    throw ConfigError("loader: mean/std need one value per channel (" + std::to_string(channels) + "), got " +
                      std::to_string(options_.mean.size()) + "/" + std::to_string(options_.std.size()));
  }
  for (float s : options_.std) {
    if (!(s > 0)) throw ConfigError("loader: std values must be > 0");
  }
  if (options_.num_workers < 0 || options_.prefetch_batches < 1 || options_.crop_padding < 0) {
    throw ConfigError("loader: num_workers >= 0, prefetch_batches >= 1 and crop_padding >= 0 expected");
  }
  if (options_.even_shards) {
    samples_per_epoch_ = DistributedSampler(dataset_.size(), options_.world_size, options_.rank).num_samples();
  } else {
    samples_per_epoch_ = (dataset_.size() - options_.rank + options_.world_size - 1) / options_.world_size;
  }
  pin_ = options_.device.is_cuda() && options_.pin_memory;
}

DataLoader::~DataLoader() { stopWorkers(); }

int64_t DataLoader::batchesPerEpoch() const {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? samples_per_epoch_ / b : (samples_per_epoch_ + b - 1) / b;
}

std::vector<int64_t> DataLoader::epochIndices(int64_t epoch) const {
  if (options_.even_shards) {
    DistributedSampler sampler(dataset_.size(), options_.world_size, options_.rank, options_.shuffle, options_.seed);
    sampler.set_epoch(epoch);
    return sampler.indices();
  }
  std::vector<int64_t> order;
  if (options_.shuffle) {
    DistributedSampler all(dataset_.size(), 1, 0, true, options_.seed);
    all.set_epoch(epoch);
    order = all.indices();
  } else {
    order.resize(static_cast<size_t>(dataset_.size()));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  }
  std::vector<int64_t> mine;
  for (size_t i = static_cast<size_t>(options_.rank); i < order.size(); i += static_cast<size_t>(options_.world_size)) {
    mine.push_back(order[i]);
  }
  return mine;
}

void DataLoader::stopWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = false;
  ready_.clear();
  error_ = nullptr;
}

void DataLoader::startEpoch(int64_t epoch, int64_t start_batch) {
  stopWorkers();
  const int64_t batches = batchesPerEpoch();
  if (start_batch < 0 || start_batch > batches) {
    throw ConfigError("loader: start batch " + std::to_string(start_batch) + " is outside the epoch's " +
                      std::to_string(batches) + " batches");
  }
  epoch_ = epoch;
  indices_ = epochIndices(epoch);
  end_batch_ = batches;
  next_to_deliver_ = start_batch;
  next_to_claim_ = start_batch;
  for (int i = 0; i < options_.num_workers; ++i) workers_.emplace_back([this] { workerLoop(); });
}

Batch DataLoader::assemble(int64_t batch) const {
  const int64_t begin = batch * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, static_cast<int64_t>(indices_.size()));
  std::vector<int64_t> picked(indices_.begin() + begin, indices_.begin() + end);
  torch::Tensor index = torch::tensor(picked, torch::kLong);
  TransformSpec spec{options_.mean,        options_.std,        options_.random_crop, options_.crop_padding,
                     options_.random_flip, options_.seed,       epoch_};
  Batch out;
  out.images = transformBatch(dataset_.images.index_select(0, index), picked, spec);
  out.labels = dataset_.labels.index_select(0, index);
  if (out.labels.scalar_type() != torch::kLong) throw ConfigError("loader: labels must be int64");
  if (options_.channels_last) out.images = out.images.contiguous(at::MemoryFormat::ChannelsLast);
  if (pin_) {
    out.images = out.images.pin_memory();
    out.labels = out.labels.pin_memory();
  }
  out.index = batch;
  out.samples_before = begin;
  return out;
}

void DataLoader::workerLoop() {
  for (;;) {
    int64_t batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] {
        return stopping_ || error_ || (next_to_claim_ < end_batch_ &&
                                       next_to_claim_ < next_to_deliver_ + options_.prefetch_batches);
      });
      if (stopping_ || error_) return;
      batch = next_to_claim_++;
    }
    try {
      Batch assembled = assemble(batch);
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.emplace(batch, std::move(assembled));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    cv_.notify_all();
  }
}

std::optional<Batch> DataLoader::next() {
  if (next_to_deliver_ >= end_batch_) return std::nullopt;
  Batch batch;
  if (workers_.empty()) {
    batch = assemble(next_to_deliver_);
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return error_ || ready_.count(next_to_deliver_) > 0; });
    if (error_) std::rethrow_exception(error_);
    batch = std::move(ready_.at(next_to_deliver_));
    ready_.erase(next_to_deliver_);
  }
  ++next_to_deliver_;
  cv_.notify_all();
  if (options_.device.is_cuda()) {
    batch.images = batch.images.to(options_.device, /*non_blocking=*/pin_);
    batch.labels = batch.labels.to(options_.device, /*non_blocking=*/pin_);
  }
  return batch;
}

}  // namespace dtrain::data
