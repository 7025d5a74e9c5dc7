// dtrain::ImageLoader: the public face of data/'s image sets and loader.
#include "dtrain/data.h"

#include <filesystem>

#include "data/cifar_dataset.h"
#include "data/idx_dataset.h"
#include "data/loader.h"

namespace dtrain {

struct ImageLoader::Impl {
  std::unique_ptr<data::DataLoader> loader;
  int64_t classes = 0;
};

namespace {

// CIFAR-10's binary batches, else IDX files (whose reader names what is missing).
data::ImageDataset loadSplit(const std::string& dir, bool train) {
  const std::filesystem::path root(dir);
  if (std::filesystem::exists(root / "data_batch_1.bin") || std::filesystem::exists(root / "test_batch.bin")) {
    return data::loadCifarSplit(dir, train);
  }
  return data::loadIdxSplit(dir, train);
}

}  // namespace

ImageLoader::ImageLoader(const Context& ctx, const std::string& dir, const ImageLoaderOptions& options)
    : impl_(std::make_unique<Impl>()) {
  data::ImageDataset dataset = loadSplit(dir, options.train);
  impl_->classes = dataset.size() > 0 ? dataset.labels.max().item<int64_t>() + 1 : 0;
  data::LoaderOptions o;
  o.batch_size = options.batch_size;
  o.shuffle = options.shuffle;
  o.seed = options.seed;
  o.rank = ctx.rank();
  o.world_size = ctx.size();
  o.drop_last = options.drop_last;
  o.num_workers = options.num_workers;
  o.mean = options.mean;
  o.std = options.std;
  o.random_crop = options.random_crop;
  o.random_flip = options.random_flip;
  o.device = ctx.device();
  impl_->loader = std::make_unique<data::DataLoader>(std::move(dataset), o);
}

ImageLoader::~ImageLoader() = default;

void ImageLoader::startEpoch(int64_t epoch) { impl_->loader->startEpoch(epoch); }

std::optional<ImageBatch> ImageLoader::next() {
  auto batch = impl_->loader->next();
  if (!batch) return std::nullopt;
  return ImageBatch{std::move(batch->images), std::move(batch->labels)};
}

int64_t ImageLoader::batchesPerEpoch() const { return impl_->loader->batchesPerEpoch(); }

int64_t ImageLoader::classes() const { return impl_->classes; }

}  // namespace dtrain
