#include "data/loader.h"

#include <torch/cuda.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "common/error.h"
#include "data/distributed_sampler.h"
#include "data/transforms.h"

namespace dtrain::data {
namespace {

std::string describe(const torch::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::ostringstream s;
  s << t.scalar_type() << " " << t.sizes() << " on " << t.device();
  return s.str();
}

void checkDataset(const ImageDataset& d, int64_t world_size) {
  if (d.size() == 0) throw ConfigError("loader: the dataset is empty");
  if (!d.images.defined() || d.images.dim() != 4 || d.images.scalar_type() != torch::kByte ||
      !d.images.device().is_cpu()) {
    throw ConfigError("loader: dataset images are " + describe(d.images) + "; expected uint8 [N, C, H, W] on the CPU");
  }
  if (d.labels.dim() != 1 || d.labels.scalar_type() != torch::kLong || !d.labels.device().is_cpu() ||
      d.labels.size(0) != d.images.size(0)) {
    throw ConfigError("loader: dataset labels are " + describe(d.labels) + "; expected int64 [" +
                      std::to_string(d.images.size(0)) + "] (one per image) on the CPU");
  }
  if (d.size() < world_size) {
    throw ConfigError("loader: dataset has " + std::to_string(d.size()) + " samples but " +
                      std::to_string(world_size) + " ranks; every rank needs at least one sample");
  }
}

void checkOptions(const LoaderOptions& o, int64_t channels) {
  if (o.batch_size <= 0) throw ConfigError("--batch-size must be > 0, got " + std::to_string(o.batch_size));
  if (o.mean.size() != o.std.size() || (!o.mean.empty() && static_cast<int64_t>(o.mean.size()) != channels)) {
    throw ConfigError("loader: normalisation mean/std need one value per channel (" + std::to_string(channels) +
                      "), got " + std::to_string(o.mean.size()) + "/" + std::to_string(o.std.size()));
  }
  for (float s : o.std) {
    if (!(s > 0)) throw ConfigError("loader: normalisation std values must be > 0, got " + std::to_string(s));
  }
  if (o.num_workers < 0) throw ConfigError("loader: num_workers must be >= 0, got " + std::to_string(o.num_workers));
  if (o.prefetch_batches < 1) {
    throw ConfigError("loader: prefetch_batches must be >= 1, got " + std::to_string(o.prefetch_batches));
  }
  if (o.crop_padding < 0) throw ConfigError("loader: crop_padding must be >= 0, got " + std::to_string(o.crop_padding));
  if (o.device.is_cuda() && !torch::cuda::is_available()) {
    throw ConfigError("loader: device is " + o.device.str() + " but CUDA is not available");
  }
}

}  // namespace

DataLoader::DataLoader(ImageDataset dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  const int64_t world = options_.world_size, rank = options_.rank;
  if (world < 1 || rank < 0 || rank >= world) {
    throw ConfigError("loader: rank " + std::to_string(rank) + " is not in [0, " + std::to_string(world) +
                      ") for a world of " + std::to_string(world));
  }
  checkDataset(dataset_, world);
  checkOptions(options_, dataset_.images.size(1));
  const int64_t n = dataset_.size();
  samples_per_epoch_ = options_.even_shards ? DistributedSampler(n, world, rank).num_samples()
                                            : (n - rank + world - 1) / world;
  pin_ = options_.device.is_cuda() && options_.pin_memory && torch::cuda::is_available();
}

DataLoader::~DataLoader() { stopWorkers(); }

int64_t DataLoader::batchesPerEpoch() const {
  const int64_t b = options_.batch_size;
  return options_.drop_last ? samples_per_epoch_ / b : (samples_per_epoch_ + b - 1) / b;
}

std::vector<int64_t> epochOrder(int64_t dataset_size, const LoaderOptions& options, int64_t epoch) {
  const int64_t n = dataset_size;
  if (options.even_shards) {
    DistributedSampler sampler(n, options.world_size, options.rank, options.shuffle, options.seed);
    sampler.set_epoch(epoch);
    return sampler.indices();
  }
  // The same order as one replica of the sampler sees, dealt out unpadded.
  DistributedSampler whole(n, 1, 0, options.shuffle, options.seed);
  whole.set_epoch(epoch);
  const std::vector<int64_t> order = whole.indices();
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>((n + options.world_size - 1) / options.world_size));
  for (int64_t j = options.rank; j < n; j += options.world_size) mine.push_back(order[static_cast<size_t>(j)]);
  return mine;
}

void DataLoader::startEpoch(int64_t epoch, int64_t start_batch) {
  stopWorkers();
  const int64_t batches = batchesPerEpoch();
  if (start_batch < 0 || start_batch > batches) {
    throw ConfigError("loader: start batch " + std::to_string(start_batch) + " is outside the epoch's " +
                      std::to_string(batches) + " batches");
  }
  epoch_ = epoch;
  indices_ = epochOrder(dataset_.size(), options_, epoch);
  end_batch_ = batches;
  next_to_deliver_ = next_to_claim_ = start_batch;
  for (int i = 0; i < options_.num_workers && start_batch < batches; ++i) {
    workers_.emplace_back([this] { workerLoop(); });
  }
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
  failed_batch_ = INT64_MAX;
  error_ = nullptr;
  end_batch_ = next_to_deliver_ = next_to_claim_ = 0;
}

Batch DataLoader::assemble(int64_t batch) const {
  const int64_t begin = batch * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, static_cast<int64_t>(indices_.size()));
  std::vector<int64_t> picked(indices_.begin() + begin, indices_.begin() + end);
  const torch::Tensor index = torch::from_blob(picked.data(), {end - begin}, torch::kLong);
  const torch::Tensor& images = dataset_.images;

  Batch out;
  out.index = batch;
  out.samples_before = begin;
  // Allocated where and how they are delivered (pinned, channels_last), so
  // the transforms write the final layout and nothing is copied after.
  out.images = torch::empty({end - begin, images.size(1), images.size(2), images.size(3)},
                            torch::TensorOptions().dtype(torch::kFloat).pinned_memory(pin_),
                            options_.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous);
  out.labels = torch::empty({end - begin}, torch::TensorOptions().dtype(torch::kLong).pinned_memory(pin_));
  torch::index_select_out(out.labels, dataset_.labels, 0, index);
  TransformSpec spec{options_.mean,        options_.std,  options_.random_crop, options_.crop_padding,
                     options_.random_flip, options_.seed, epoch_};
  transformBatchInto(images.index_select(0, index), picked, spec, out.images);
  return out;
}

void DataLoader::workerLoop() {
  for (;;) {
    int64_t batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto exhausted = [&] { return next_to_claim_ >= std::min(end_batch_, failed_batch_); };
      cv_.wait(lock, [&] {
        return stopping_ || exhausted() || next_to_claim_ < next_to_deliver_ + options_.prefetch_batches;
      });
      if (stopping_ || exhausted()) return;
      batch = next_to_claim_++;
    }
    try {
      Batch assembled = assemble(batch);
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.emplace(batch, std::move(assembled));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (batch < failed_batch_) {
        failed_batch_ = batch;
        error_ = std::current_exception();
      }
    }
    cv_.notify_all();
  }
}

std::optional<Batch> DataLoader::next() {
  std::optional<Batch> batch;
  if (workers_.empty()) {
    // No threads: the bookkeeping is the caller's alone.
    if (next_to_deliver_ >= end_batch_) return std::nullopt;
    if (failed_batch_ <= next_to_deliver_) std::rethrow_exception(error_);
    try {
      batch = assemble(next_to_deliver_);
    } catch (...) {
      failed_batch_ = next_to_deliver_;
      error_ = std::current_exception();
      throw;
    }
    ++next_to_deliver_;
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    const int64_t want = next_to_deliver_;
    if (want >= end_batch_) return std::nullopt;
    cv_.wait(lock, [&] { return failed_batch_ <= want || ready_.count(want) > 0; });
    if (failed_batch_ <= want) std::rethrow_exception(error_);
    auto it = ready_.find(want);
    batch = std::move(it->second);
    ready_.erase(it);
    ++next_to_deliver_;
    lock.unlock();
    cv_.notify_all();  // a prefetch slot is free
  }
  if (!options_.device.is_cpu()) {
    // From pinned memory this only queues the copy on the current stream.
    batch->images = batch->images.to(options_.device, /*non_blocking=*/pin_);
    batch->labels = batch->labels.to(options_.device, /*non_blocking=*/pin_);
  }
  return batch;
}

}  // namespace dtrain::data
