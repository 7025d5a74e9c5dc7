// ImageClassificationTask: the image data sets `dtrain train` knows
// (Fashion-MNIST and MNIST from IDX files, CIFAR-10 binary batches,
// synthetic images), their batches from the prefetching loader or kept on
// the device (--data-on-gpu), and test-set accuracy. (private to train/)
#pragma once

#include <optional>
#include <vector>

#include "data/dataset.h"
#include "data/loader.h"
#include "train/task.h"

namespace dtrain {

class ImageClassificationTask : public Task {
 public:
  // Loads the data set now, so that a missing or malformed file is a
  // ConfigError naming --dataset or --data-dir and the file before any rank
  // waits on another.
  ImageClassificationTask(const DataOptions& data, const ModelSpec& model, uint64_t seed);

  std::string describe() const override;
  std::shared_ptr<models::Model> makeModel() const override;
  std::unique_ptr<BatchSource> trainBatches(int rank, int world_size, torch::Device device) const override;
  Evaluation evaluate(models::Model& model, Context& ctx, const DataRanks& ranks, Precision precision) override;

  // The loader options of training batches (shuffled, augmented as the data
  // set wants) and of evaluation (in order, unpadded).
  data::LoaderOptions trainLoaderOptions(int rank, int world_size, torch::Device device) const;
  data::LoaderOptions testLoaderOptions(int rank, int world_size, torch::Device device) const;

 private:
  void load();
  // ConfigError when the test images are not of the training images' shape.
  void checkSplitsAgree() const;

  DataOptions options_;
  ModelSpec model_;
  uint64_t seed_;
  data::ImageDataset train_, test_;
  int64_t channels_ = 1, image_size_ = 28, classes_ = 10;
  std::vector<float> mean_, std_;
  bool augment_ = false;  // random crop with padding + horizontal flip (CIFAR)
  std::unique_ptr<data::DataLoader> test_loader_;
};

}  // namespace dtrain
