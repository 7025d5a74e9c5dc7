// DataLoader: this rank's batches of an in-memory ImageDataset, assembled by
// background threads (gather, scale to [0,1], normalise, augment) and
// delivered in order on the training device.
//
// Contract:
// - Batches depend only on (dataset, options, epoch): the sample order is
//   DistributedSampler's (shuffle by seed + epoch), and augmentation draws
//   are a pure function of (seed, epoch, dataset index), never of thread
//   timing or num_workers. startEpoch(e, k) resumes mid-epoch: its batches
//   are exactly batches k.. of an uninterrupted epoch e.
// - even_shards (training): every rank gets the same number of samples,
//   padded as DistributedSampler pads. Off (evaluation): rank r takes
//   positions r, r + world, ... of the unpadded order, so every sample is
//   seen exactly once across ranks.
// - CUDA device: batches are assembled in pinned memory and copied with
//   non_blocking=true on the current stream.
// - A failure while assembling a batch is rethrown from next(); the
//   destructor and startEpoch() stop the old epoch's work promptly.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/dataset.h"

namespace dtrain::data {

struct LoaderOptions {
  int64_t batch_size = 64;  // per rank
  bool shuffle = true;
  uint64_t seed = 0;
  int64_t rank = 0;
  int64_t world_size = 1;
  bool drop_last = false;    // drop this rank's last incomplete batch
  bool even_shards = true;
  int num_workers = 2;       // 0: assemble on the caller's thread
  int prefetch_batches = 4;
  std::vector<float> mean, std;  // per channel, after scaling to [0,1]; empty: none
  bool random_crop = false;
  int64_t crop_padding = 4;
  bool random_flip = false;
  torch::Device device = torch::kCPU;
  bool pin_memory = true;    // CUDA device only
  bool channels_last = false;
};

struct Batch {
  torch::Tensor images;  // float32 [B, C, H, W] on the device
  torch::Tensor labels;  // int64 [B] on the device
  int64_t index = 0;     // batch number within the epoch
  int64_t samples_before = 0;
};

class DataLoader {
 public:
  // ConfigError: empty dataset, more ranks than samples, bad options.
  DataLoader(ImageDataset dataset, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  void startEpoch(int64_t epoch, int64_t start_batch = 0);
  std::optional<Batch> next();
  int64_t batchesPerEpoch() const;
  int64_t samplesPerEpoch() const { return samples_per_epoch_; }
  const LoaderOptions& options() const { return options_; }

 private:
  std::vector<int64_t> epochIndices(int64_t epoch) const;
  Batch assemble(int64_t batch) const;
  void stopWorkers();
  void workerLoop();

  ImageDataset dataset_;
  LoaderOptions options_;
  int64_t samples_per_epoch_ = 0;
  bool pin_ = false;

  // The current epoch (read-only while workers run).
  int64_t epoch_ = 0;
  std::vector<int64_t> indices_;
  int64_t end_batch_ = 0;
  int64_t next_to_deliver_ = 0;

  std::mutex mutex_;
  std::condition_variable cv_;
  int64_t next_to_claim_ = 0;
  std::map<int64_t, Batch> ready_;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace dtrain::data
