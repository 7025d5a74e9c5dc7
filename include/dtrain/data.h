// Image data for a training loop of your own: this rank's share of an image
// classification set, in shuffled batches assembled ahead on threads.
//
//   dtrain::ImageLoader loader(*ctx, "/usr/share/datasets/fashion-mnist",
//                              {.batch_size = 64, .mean = {0.2860f}, .std = {0.3530f}});
//   for (int64_t epoch = 0; epoch < 3; ++epoch) {
//     loader.startEpoch(epoch);                // a new order, the same on every rank
//     while (auto batch = loader.next()) { ... batch->images, batch->labels ... }
//   }
//
// The folder holds Fashion-MNIST/MNIST IDX files (train-images-idx3-ubyte,
// optionally .gz) or CIFAR-10's binary batches (data_batch_1.bin ...). Each
// rank reads a disjoint shard of the same epoch order; an epoch has the same
// number of batches on every rank.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "dtrain/init.h"

namespace dtrain {

struct ImageLoaderOptions {
  int64_t batch_size = 64;        // per rank
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;         // drop this rank's last incomplete batch
  int num_workers = 2;            // assembling threads (0: assemble in next())
  std::vector<float> mean, std;   // per channel, after scaling to [0,1]; empty: none
  bool random_crop = false;       // pad 4 and crop back (CIFAR-style augmentation)
  bool random_flip = false;       // horizontal, p = 0.5
  bool train = true;              // the training split, else the test split
};

struct ImageBatch {
  torch::Tensor images;  // float32 [B, C, H, W] on the context's device
  torch::Tensor labels;  // int64 [B] on the context's device
};

class ImageLoader {
 public:
  // Reads the split now; a missing or malformed file is an error naming it.
  ImageLoader(const Context& ctx, const std::string& dir, const ImageLoaderOptions& options = {});
  ~ImageLoader();
  ImageLoader(const ImageLoader&) = delete;
  ImageLoader& operator=(const ImageLoader&) = delete;

  void startEpoch(int64_t epoch);
  // The next batch of this rank's shard, or nullopt at the end of the epoch.
  std::optional<ImageBatch> next();
  int64_t batchesPerEpoch() const;
  int64_t classes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain
