#include "data/cifar_dataset.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "common/error.h"
#include "data/data_file.h"

namespace dtrain::data {

ImageDataset loadCifarBatch(const std::string& path) {
  // A gzipped batch is read too; the bound stops a gzip bomb.
  std::vector<uint8_t> bytes = readDataFile(path, "CIFAR-10 batch", kCifarMaxBatchBytes);
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size == 0 || size % kCifarRecordBytes != 0) {
    const int64_t whole = size / kCifarRecordBytes;
    throw ConfigError(path + " has " + std::to_string(size) + " bytes; expected a positive multiple of " +
                      std::to_string(kCifarRecordBytes) + " (1 label + 3072 pixel bytes per record), e.g. " +
                      std::to_string(std::max<int64_t>(whole, 1) * kCifarRecordBytes) + " for " +
                      std::to_string(std::max<int64_t>(whole, 1)) + " records");
  }
  const int64_t n = size / kCifarRecordBytes;
  ImageDataset ds{torch::empty({n, 3, 32, 32}, torch::kUInt8), torch::empty({n}, torch::kLong)};
  uint8_t* images = ds.images.data_ptr<uint8_t>();
  int64_t* labels = ds.labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* record = bytes.data() + i * kCifarRecordBytes;
    if (record[0] >= kCifarClasses) {
      throw ConfigError(path + " record " + std::to_string(i) + " has label " +
                        std::to_string(record[0]) + "; expected 0.." + std::to_string(kCifarClasses - 1));
    }
    labels[i] = record[0];
    std::memcpy(images + i * (kCifarRecordBytes - 1), record + 1, kCifarRecordBytes - 1);
  }
  return ds;
}

ImageDataset loadCifarSplit(const std::string& dir, bool train) {
  namespace fs = std::filesystem;
  fs::path root = dir;
  if (!fs::exists(root / (train ? "data_batch_1.bin" : "test_batch.bin")) &&
      fs::is_directory(root / "cifar-10-batches-bin")) {
    root /= "cifar-10-batches-bin";
  }
  std::vector<std::string> names;
  if (train) {
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  } else {
    names.push_back("test_batch.bin");
  }
  std::vector<torch::Tensor> images, labels;
  for (const auto& name : names) {
    fs::path p = root / name;
    if (!fs::exists(p)) {
      throw ConfigError("CIFAR-10 " + std::string(train ? "train" : "test") + " split not found in " +
                        dir + ": expected " + name + " (binary version, cifar-10-batches-bin)");
    }
    ImageDataset batch = loadCifarBatch(p.string());
    images.push_back(batch.images);
    labels.push_back(batch.labels);
  }
  if (images.size() == 1) return ImageDataset{images[0], labels[0]};
  return ImageDataset{torch::cat(images), torch::cat(labels)};
}

}  // namespace dtrain::data
