// DataLoader: this rank's batches of an in-memory ImageDataset, assembled by
// background threads (gather, scale to [0,1], augment, normalise; see
// transforms.h) and delivered in order on the training device.
//
// Contract:
// - Batches depend only on (dataset, options, epoch): the sample order is
//   DistributedSampler's (shuffle by seed + epoch), augmentation draws are a
//   pure function of (seed, epoch, dataset index), never of thread timing or
//   num_workers. startEpoch(e, k) resumes mid-epoch: its batches are exactly
//   batches k.. of an uninterrupted epoch e.
// - even_shards (training): every rank gets the same number of samples,
//   padded as DistributedSampler pads. Off (evaluation): rank r takes
//   positions r, r + world, ... of the unpadded order, so every sample is
//   seen exactly once across ranks and ranks may differ by one sample.
// - CPU device: batches are assembled where they are delivered, no copy.
//   CUDA device: assembled in pinned host memory (when pin_memory and CUDA
//   is available) and copied in next() with non_blocking=true on the
//   caller's current stream, so the copy is ordered before work the caller
//   then queues on that stream.
// - At most prefetch_batches batches are assembled ahead of the consumer.
// - A failure while assembling batch k is rethrown by the next() that would
//   have returned batch k (the same batch for any num_workers), and by every
//   later next() of that epoch. startEpoch() and the destructor cancel the
//   current epoch's work: they wait only for batches already being assembled.
// - Not thread-safe: one consumer thread calls startEpoch() and next().
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
  int64_t batch_size = 64;  // per rank, >= 1
  bool shuffle = true;
  uint64_t seed = 0;
  int64_t rank = 0;
  int64_t world_size = 1;
  bool drop_last = false;     // drop this rank's last incomplete batch
  bool even_shards = true;    // see the contract above
  int num_workers = 2;        // assembling threads; 0: assemble inside next()
  int prefetch_batches = 4;   // >= 1
  std::vector<float> mean, std;  // one per channel, after scaling to [0,1]; empty: none
  bool random_crop = false;   // zero-pad by crop_padding, crop back to H x W
  int64_t crop_padding = 4;
  bool random_flip = false;   // horizontal, p = 0.5
  torch::Device device = torch::kCPU;
  bool pin_memory = true;     // CUDA device only
  bool channels_last = false;
};

struct Batch {
  torch::Tensor images;  // float32 [B, C, H, W] on the device
  torch::Tensor labels;  // int64 [B] on the device
  int64_t index = 0;     // batch number within the epoch, 0-based
  int64_t samples_before = 0;  // this rank's samples before this batch in the epoch
};

// This rank's dataset indices for `epoch`, in delivery order, as the
// contract above describes (DistributedSampler's order; see even_shards).
std::vector<int64_t> epochOrder(int64_t dataset_size, const LoaderOptions& options, int64_t epoch);

class DataLoader {
 public:
  // ConfigError, naming the option or the data: an empty dataset, images not
  // uint8 [N, C, H, W] on the CPU, labels not int64 [N], fewer samples than
  // ranks, a bad option (batch size, rank, mean/std size or a std <= 0,
  // negative workers/padding, prefetch < 1), or a CUDA device without CUDA.
  DataLoader(ImageDataset dataset, LoaderOptions options);
  ~DataLoader();  // cancels the epoch and joins the threads
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts epoch `epoch` at batch start_batch (0 <= start_batch <=
  // batchesPerEpoch(), else ConfigError), cancelling any epoch in progress.
  void startEpoch(int64_t epoch, int64_t start_batch = 0);
  // The epoch's next batch; nullopt at its end (and before any startEpoch).
  std::optional<Batch> next();

  int64_t batchesPerEpoch() const;
  int64_t samplesPerEpoch() const { return samples_per_epoch_; }  // this rank's
  const LoaderOptions& options() const { return options_; }

 private:
  Batch assemble(int64_t batch) const;
  void stopWorkers();
  void workerLoop();

  ImageDataset dataset_;
  LoaderOptions options_;
  int64_t samples_per_epoch_ = 0;
  bool pin_ = false;

  // The current epoch; written only while no worker runs.
  int64_t epoch_ = 0;
  std::vector<int64_t> indices_;
  int64_t end_batch_ = 0;

  std::mutex mutex_;
  std::condition_variable cv_;  // any change below
  int64_t next_to_deliver_ = 0;            // GUARDED_BY(mutex_)
  int64_t next_to_claim_ = 0;              // GUARDED_BY(mutex_)
  std::map<int64_t, Batch> ready_;         // GUARDED_BY(mutex_)
  int64_t failed_batch_ = INT64_MAX;       // GUARDED_BY(mutex_); the lowest that threw
  std::exception_ptr error_;               // GUARDED_BY(mutex_); its exception
  bool stopping_ = false;                  // GUARDED_BY(mutex_)
  std::vector<std::thread> workers_;
};

}  // namespace dtrain::data
