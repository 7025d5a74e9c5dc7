// The data sets `dtrain train` knows, and the loader settings for each
// (private to train/).
#pragma once

#include <vector>

#include "data/dataset.h"
#include "data/loader.h"
#include "train/trainer.h"

namespace dtrain {

struct TrainData {
  data::ImageDataset train;
  data::ImageDataset test;
  int64_t channels = 1;
  int64_t image_size = 28;
  int64_t classes = 10;
  std::vector<float> mean, std;
  bool augment = false;  // random crop with padding + horizontal flip (CIFAR)
};

// fashion-mnist | mnist (IDX files), cifar10 (binary batches), synthetic.
// ConfigError naming --dataset or --data-dir and what was expected.
TrainData loadTrainData(const TrainConfig& config);

data::LoaderOptions trainLoaderOptions(const TrainConfig& config, const TrainData& data, int rank, int world_size,
                                       torch::Device device);
// Evaluation: no shuffle, no padding (every test sample counted once).
data::LoaderOptions testLoaderOptions(const TrainConfig& config, const TrainData& data, int rank, int world_size,
                                      torch::Device device);

}  // namespace dtrain
