#include "train/image_classification.h"

#include <sys/stat.h>

#include <cmath>

#include "common/error.h"
#include "common/files.h"
#include "data/cifar_dataset.h"
#include "data/device_data.h"
#include "data/idx_dataset.h"
#include "data/synthetic_dataset.h"

namespace dtrain {
namespace {

constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

std::string requireDir(const DataOptions& o, const std::string& fallback, const std::string& hint) {
  const std::string dir = o.data_dir.empty() ? fallback : o.data_dir;
  if (dir.empty()) {
    throw ConfigError(std::string("--dataset ") + datasetName(o.dataset) + " needs --data-dir (" + hint + ")");
  }
  if (!isDirectory(dir)) {
    throw ConfigError("--data-dir '" + dir + "' is not a directory; expected " + hint);
  }
  return dir;
}

TrainBatch toTrainBatch(data::Batch batch) {
  TrainBatch out;
  out.samples = batch.labels.size(0);
  out.index = batch.index;
  out.inputs = std::move(batch.images);
  out.targets = std::move(batch.labels);
  return out;
}

// Batches from the prefetching loader.
class LoaderBatches : public BatchSource {
 public:
  LoaderBatches(const data::ImageDataset& dataset, data::LoaderOptions options) : loader_(dataset, options) {}
  int64_t batchesPerEpoch() const override { return loader_.batchesPerEpoch(); }
  void startEpoch(int64_t epoch, int64_t first_batch) override { loader_.startEpoch(epoch, first_batch); }
  std::optional<TrainBatch> next() override {
    std::optional<data::Batch> batch = loader_.next();
    if (!batch) return std::nullopt;
    return toTrainBatch(std::move(*batch));
  }

 private:
  data::DataLoader loader_;
};

// Batches built on the device once per epoch (--data-on-gpu).
class DeviceBatches : public BatchSource {
 public:
  DeviceBatches(const data::ImageDataset& dataset, data::LoaderOptions options) : data_(dataset, options) {}
  int64_t batchesPerEpoch() const override { return data_.batchesPerEpoch(); }
  void startEpoch(int64_t epoch, int64_t first_batch) override {
    data_.startEpoch(epoch);
    next_ = first_batch;
  }
  std::optional<TrainBatch> next() override {
    if (next_ >= data_.batchesPerEpoch()) return std::nullopt;
    return toTrainBatch(data_.batch(next_++));
  }
  std::string describe() const override { return ", data on the device"; }

 private:
  data::DeviceEpochData data_;
  int64_t next_ = 0;
};

}  // namespace

ImageClassificationTask::ImageClassificationTask(const DataOptions& data, const ModelSpec& model, uint64_t seed)
    : options_(data), model_(model), seed_(seed) {
  load();
  channels_ = train_.images.size(1);
  image_size_ = train_.images.size(2);
}

void ImageClassificationTask::load() {
  const DatasetKind dataset = options_.dataset;
  if (dataset == DatasetKind::kFashionMnist || dataset == DatasetKind::kMnist) {
    const bool fashion = dataset == DatasetKind::kFashionMnist;
    const std::string hint = "the IDX files train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
                             "t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]" +
                             std::string(fashion ? " (Debian: apt-get install dataset-fashion-mnist)" : "");
    const std::string dir = requireDir(options_, fashion ? kFashionMnistDir : "", hint);
    // The classes are what the data set declares, never what its labels
    // happen to hold: the readers refuse a label outside them.
    classes_ = data::kIdxClasses;
    train_ = data::loadIdxSplit(dir, /*train=*/true, classes_);
    test_ = data::loadIdxSplit(dir, /*train=*/false, classes_);
    mean_ = fashion ? std::vector<float>{0.2860f} : std::vector<float>{0.1307f};
    std_ = fashion ? std::vector<float>{0.3530f} : std::vector<float>{0.3081f};
  } else if (dataset == DatasetKind::kCifar10) {
    const std::string dir = requireDir(options_, "", "the CIFAR-10 binary version: data_batch_1..5.bin, test_batch.bin");
    classes_ = data::kCifarClasses;
    train_ = data::loadCifarSplit(dir, /*train=*/true);
    test_ = data::loadCifarSplit(dir, /*train=*/false);
    mean_ = {0.4914f, 0.4822f, 0.4465f};
    std_ = {0.2470f, 0.2435f, 0.2616f};
    augment_ = true;
  } else if (dataset == DatasetKind::kSynthetic) {
    data::SyntheticSpec spec;
    spec.channels = 3;
    spec.height = spec.width = options_.synthetic_image_size;
    spec.classes = classes_ = 10;
    spec.seed = seed_;
    spec.size = options_.synthetic_samples;
    train_ = data::makeSyntheticDataset(spec);
    spec.seed = seed_ + 1;
    spec.size = std::max<int64_t>(1, options_.synthetic_samples / 4);
    test_ = data::makeSyntheticDataset(spec);
    mean_ = {0.5f, 0.5f, 0.5f};  // uniform bytes: mean 0.5, std ~0.29
    std_ = {0.25f, 0.25f, 0.25f};
  } else {
    throw ConfigError(std::string("--dataset '") + datasetName(dataset) +
                      "': unknown; expected one of fashion-mnist, mnist, cifar10 or synthetic");
  }
  checkSplitsAgree();
}

// The model is built for the training images: test images of another
// shape would fail only at the first evaluation, deep in a product.
void ImageClassificationTask::checkSplitsAgree() const {
  const auto shapeOf = [](const torch::Tensor& images) {
    std::string text;
    for (int64_t d = 1; d < images.dim(); ++d) text += (d > 1 ? "x" : "") + std::to_string(images.size(d));
    return text;
  };
  if (train_.images.sizes().slice(1) == test_.images.sizes().slice(1)) return;
  const bool idx = options_.dataset == DatasetKind::kFashionMnist || options_.dataset == DatasetKind::kMnist;
  const std::string where = options_.data_dir.empty() ? std::string(datasetName(options_.dataset))
                                                      : "--data-dir " + options_.data_dir;
  throw ConfigError(where + ": the test images" + (idx ? " (t10k-images-idx3-ubyte)" : "") + " are " +
                    shapeOf(test_.images) + " (channels x height x width), the training images" +
                    (idx ? " (train-images-idx3-ubyte)" : "") + " " + shapeOf(train_.images) +
                    "; expected both splits to hold images of one shape");
}

std::string ImageClassificationTask::describe() const {
  return model_.name + " on " + datasetName(options_.dataset) + " (" + std::to_string(train_.size()) + " train / " +
         std::to_string(test_.size()) + " test)";
}

std::shared_ptr<models::Model> ImageClassificationTask::makeModel() const {
  models::ModelOptions o;
  o.in_channels = channels_;
  o.num_classes = classes_;
  o.image_size = image_size_;
  o.stem = stemName(model_.stem);  // models::ModelOptions takes the word
  return models::createModel(model_.name, o);
}

data::LoaderOptions ImageClassificationTask::trainLoaderOptions(int rank, int world_size,
                                                                torch::Device device) const {
  data::LoaderOptions o;
  o.batch_size = options_.batch_size;
  o.shuffle = true;
  o.seed = seed_;
  o.rank = rank;
  o.world_size = world_size;
  o.drop_last = false;
  o.num_workers = options_.loader_workers;
  o.mean = mean_;
  o.std = std_;
  o.random_crop = augment_;
  o.random_flip = augment_;
  o.device = device;
  o.channels_last = model_.channels_last;
  return o;
}

data::LoaderOptions ImageClassificationTask::testLoaderOptions(int rank, int world_size, torch::Device device) const {
  data::LoaderOptions o = trainLoaderOptions(rank, world_size, device);
  o.shuffle = false;
  o.even_shards = false;
  o.random_crop = false;
  o.random_flip = false;
  o.batch_size = std::max<int64_t>(options_.batch_size, 256);
  return o;
}

std::unique_ptr<BatchSource> ImageClassificationTask::trainBatches(int rank, int world_size,
                                                                   torch::Device device) const {
  const data::LoaderOptions o = trainLoaderOptions(rank, world_size, device);
  if (options_.on_gpu && !device.is_cuda()) {
    throw ConfigError("--data-on-gpu needs a CUDA device, but this rank trains on " + device.str() +
                      " (no GPU visible, or --backend gloo)");
  }
  if (options_.on_gpu || options_.on_device) return std::make_unique<DeviceBatches>(train_, o);
  return std::make_unique<LoaderBatches>(train_, o);
}

Evaluation ImageClassificationTask::evaluate(models::Model& model, Context& ctx, const DataRanks& ranks,
                                            Precision precision) {
  if (!test_loader_) {
    test_loader_ = std::make_unique<data::DataLoader>(test_, testLoaderOptions(ranks.rank, ranks.size, ctx.device()));
  }
  torch::NoGradGuard no_grad;
  model.eval();
  test_loader_->startEpoch(0);
  const auto on_device = torch::TensorOptions().device(ctx.device());
  torch::Tensor correct = torch::zeros({}, on_device.dtype(torch::kLong));
  torch::Tensor loss_sum = torch::zeros({}, on_device.dtype(torch::kDouble));
  int64_t total = 0;
  while (auto batch = test_loader_->next()) {
    torch::Tensor logits;
    {
      AutocastGuard autocast(ctx.device(), precision);
      logits = model.forward(batch->images);
    }
    logits = logits.to(torch::kFloat);
    correct += logits.argmax(1).eq(batch->labels).sum();
    loss_sum += torch::nn::functional::cross_entropy(
                    logits, batch->labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                    .to(torch::kDouble);
    total += batch->labels.size(0);
  }
  model.train();
  std::vector<double> sums{static_cast<double>(correct.item<int64_t>()), static_cast<double>(total),
                           loss_sum.item<double>()};
  ctx.allreduceSum(sums);
  for (double& sum : sums) sum /= ranks.copies;
  Evaluation result;
  result.correct = static_cast<int64_t>(std::llround(sums[0]));
  result.samples = static_cast<int64_t>(std::llround(sums[1]));
  result.loss = result.samples > 0 ? sums[2] / static_cast<double>(result.samples) : 0;
  return result;
}

}  // namespace dtrain
