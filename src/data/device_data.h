// DeviceEpochData (--data-on-gpu): a data set that fits is kept whole, as
// uint8, on the training device, and each epoch's batches are built there by
// whole-epoch tensor ops, so a training step does no host work at all.
//
// Contract:
// - Batches are DataLoader's with the same options: the same samples and
//   labels in the same order (DistributedSampler's, even_shards or not,
//   drop_last), the same augmentation draws (augmentDraw per dataset index)
//   and the same arithmetic ((x / 255 - mean) / std, float32), so on the
//   same device type the images are bitwise equal to the loader's.
// - Host work is per epoch, in startEpoch(): the sample order and the draws
//   are computed on the host and uploaded once; then gather, crop (zero
//   padding), flip, scale and normalise run on the device in chunks of
//   kChunkSamples samples, so the padded intermediates stay bounded. Device
//   memory: the uint8 data set, plus one float32 epoch tensor of this rank's
//   delivered samples (batchesPerEpoch() batches).
// - batch(k) only creates views of the epoch tensors: no copy, no upload, no
//   synchronisation. A view stays valid after the next startEpoch(), which
//   builds into fresh tensors (a kept view keeps its epoch's memory alive).
// - Work is queued on the device's current stream; the epoch is ready for
//   any later work on that stream.
// - num_workers, prefetch_batches and pin_memory are ignored.
// - Not thread-safe: one thread calls startEpoch() and batch().
#pragma once

#include <cstdint>
#include <vector>

#include "data/dataset.h"
#include "data/loader.h"

namespace dtrain::data {

class DeviceEpochData {
 public:
  // Samples augmented per device pass in startEpoch().
  static constexpr int64_t kChunkSamples = 8192;

  // ConfigError as DataLoader's for the same dataset and options (bad
  // options, bad data, a CUDA device without CUDA). Uploads the data set.
  DeviceEpochData(const ImageDataset& dataset, LoaderOptions options);

  // Builds epoch `epoch`'s batches on the device: float32 [samples, C, H, W]
  // (channels_last if options.channels_last) and int64 labels [samples].
  void startEpoch(int64_t epoch);

  int64_t batchesPerEpoch() const { return batches_per_epoch_; }
  int64_t samplesPerEpoch() const { return samples_per_epoch_; }  // this rank's, as DataLoader's
  const LoaderOptions& options() const { return options_; }

  // Batch k of the current epoch, as DataLoader's k-th next() would return
  // it, as views of the epoch tensors. ConfigError before any startEpoch()
  // or when k is not in [0, batchesPerEpoch()).
  Batch batch(int64_t k) const;

 private:
  void cropFlipInto(const torch::Tensor& indices, int64_t epoch, const std::vector<int64_t>& host_indices,
                    torch::Tensor& out) const;

  LoaderOptions options_;
  int64_t dataset_size_ = 0;
  int64_t samples_per_epoch_ = 0;
  int64_t batches_per_epoch_ = 0;
  torch::Tensor images_;  // uint8 [N, C, H, W] on the device
  torch::Tensor labels_;  // int64 [N] on the device
  torch::Tensor scale_;   // 0-dim float32 255 on the device
  torch::Tensor mean_, std_;  // float32 [1, C, 1, 1] on the device; undefined: no normalisation

  bool started_ = false;
  torch::Tensor epoch_images_;  // float32 [delivered samples, C, H, W]
  torch::Tensor epoch_labels_;  // int64 [delivered samples]
};

}  // namespace dtrain::data
