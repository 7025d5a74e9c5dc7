#include "train/train_data.h"

#include <sys/stat.h>

#include "common/error.h"
#include "data/cifar_dataset.h"
#include "data/idx_dataset.h"
#include "data/synthetic_dataset.h"

namespace dtrain {
namespace {

constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

bool isDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string requireDir(const TrainConfig& config, const std::string& fallback, const std::string& hint) {
  const std::string dir = config.data_dir.empty() ? fallback : config.data_dir;
  if (dir.empty()) throw ConfigError("--dataset " + config.dataset + " needs --data-dir (" + hint + ")");
  if (!isDirectory(dir)) {
    throw ConfigError("--data-dir '" + dir + "' is not a directory; expected " + hint);
  }
  return dir;
}

}  // namespace

TrainData loadTrainData(const TrainConfig& config) {
  TrainData data;
  if (config.dataset == "fashion-mnist" || config.dataset == "mnist") {
    const std::string hint = "the IDX files train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
                             "t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]" +
                             std::string(config.dataset == "fashion-mnist"
                                             ? " (Debian: apt-get install dataset-fashion-mnist)"
                                             : "");
    const std::string dir = requireDir(config, config.dataset == "fashion-mnist" ? kFashionMnistDir : "", hint);
    data.train = data::loadIdxSplit(dir, /*train=*/true);
    data.test = data::loadIdxSplit(dir, /*train=*/false);
    data.mean = config.dataset == "fashion-mnist" ? std::vector<float>{0.2860f} : std::vector<float>{0.1307f};
    data.std = config.dataset == "fashion-mnist" ? std::vector<float>{0.3530f} : std::vector<float>{0.3081f};
  } else if (config.dataset == "cifar10") {
    const std::string dir = requireDir(config, "", "the CIFAR-10 binary version: data_batch_1..5.bin, test_batch.bin");
    data.train = data::loadCifarSplit(dir, /*train=*/true);
    data.test = data::loadCifarSplit(dir, /*train=*/false);
    data.mean = {0.4914f, 0.4822f, 0.4465f};
    data.std = {0.2470f, 0.2435f, 0.2616f};
    data.augment = true;
  } else if (config.dataset == "synthetic") {
    if (config.synthetic_samples <= 0) throw ConfigError("--synthetic-samples must be > 0");
    data::SyntheticSpec spec;
    spec.channels = 3;
    spec.height = spec.width = config.synthetic_image_size;
    spec.classes = 10;
    spec.seed = config.seed;
    spec.size = config.synthetic_samples;
    data.train = data::makeSyntheticDataset(spec);
    spec.seed = config.seed + 1;
    spec.size = std::max<int64_t>(1, config.synthetic_samples / 4);
    data.test = data::makeSyntheticDataset(spec);
    data.mean = {0.5f, 0.5f, 0.5f};  // uniform bytes: mean 0.5, std ~0.29
    data.std = {0.25f, 0.25f, 0.25f};
  } else {
    throw ConfigError("--dataset '" + config.dataset + "' is unknown; expected fashion-mnist, mnist, cifar10 or "
                      "synthetic");
  }
  data.channels = data.train.images.size(1);
  data.image_size = data.train.images.size(2);
  data.classes = std::max<int64_t>(10, data.train.labels.max().item<int64_t>() + 1);
  return data;
}

data::LoaderOptions trainLoaderOptions(const TrainConfig& config, const TrainData& data, int rank, int world_size,
                                       torch::Device device) {
  data::LoaderOptions o;
  o.batch_size = config.batch_size;
  o.shuffle = true;
  o.seed = config.seed;
  o.rank = rank;
  o.world_size = world_size;
  o.drop_last = false;
  o.num_workers = config.loader_workers;
  o.mean = data.mean;
  o.std = data.std;
  o.random_crop = data.augment;
  o.random_flip = data.augment;
  o.device = device;
  o.channels_last = config.channels_last;
  return o;
}

data::LoaderOptions testLoaderOptions(const TrainConfig& config, const TrainData& data, int rank, int world_size,
                                      torch::Device device) {
  data::LoaderOptions o = trainLoaderOptions(config, data, rank, world_size, device);
  o.shuffle = false;
  o.even_shards = false;
  o.random_crop = false;
  o.random_flip = false;
  o.batch_size = std::max<int64_t>(config.batch_size, 256);
  return o;
}

}  // namespace dtrain
