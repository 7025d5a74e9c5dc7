// DeviceEpochData: every batch of an epoch equals DataLoader's for the same
// options (order, labels, augmentation, normalisation, sharding, drop_last,
// channels_last), batches are views, and errors are the loader's.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "data/device_data.h"
#include "data/loader.h"

namespace dtrain::data {
namespace {

// Random pixels; label i names sample i, so a label mismatch is an order
// mismatch. H != W so that rows and columns cannot be confused.
ImageDataset randomImages(int64_t n = 103, int64_t channels = 3, int64_t height = 6, int64_t width = 7) {
  at::Generator generator = at::detail::createCPUGenerator(20240601);
  ImageDataset d;
  d.images = torch::randint(0, 256, {n, channels, height, width}, generator,
                            torch::TensorOptions().dtype(torch::kByte));
  d.labels = torch::arange(n, torch::kLong);
  return d;
}

LoaderOptions options(int64_t batch_size = 8) {
  LoaderOptions o;
  o.batch_size = batch_size;
  o.seed = 17;
  o.num_workers = 0;
  return o;
}

LoaderOptions augmented(int64_t batch_size = 8, int64_t crop_padding = 2) {
  LoaderOptions o = options(batch_size);
  o.random_crop = true;
  o.crop_padding = crop_padding;
  o.random_flip = true;
  o.mean = {0.49f, 0.48f, 0.45f};
  o.std = {0.25f, 0.24f, 0.26f};
  return o;
}

std::vector<Batch> loaderEpoch(const ImageDataset& d, const LoaderOptions& o, int64_t e) {
  DataLoader loader(d, o);
  loader.startEpoch(e);
  std::vector<Batch> out;
  while (auto b = loader.next()) out.push_back(std::move(*b));
  return out;
}

// Every batch of epoch e from DeviceEpochData equals the loader's; images
// bitwise when `tolerance` is 0.
void expectSameAsLoader(const ImageDataset& d, const LoaderOptions& o, int64_t e, const std::string& what,
                        double tolerance = 0) {
  const std::vector<Batch> expected = loaderEpoch(d, o, e);
  DeviceEpochData data(d, o);
  data.startEpoch(e);
  DataLoader reference(d, o);
  EXPECT_EQ(data.samplesPerEpoch(), reference.samplesPerEpoch()) << what;
  ASSERT_EQ(data.batchesPerEpoch(), static_cast<int64_t>(expected.size())) << what;
  for (int64_t k = 0; k < data.batchesPerEpoch(); ++k) {
    const Batch got = data.batch(k);
    const Batch& want = expected[static_cast<size_t>(k)];
    const std::string where = what + " batch " + std::to_string(k);
    EXPECT_EQ(got.index, want.index) << where;
    EXPECT_EQ(got.samples_before, want.samples_before) << where;
    EXPECT_EQ(got.images.device(), o.device) << where;
    EXPECT_EQ(got.images.scalar_type(), torch::kFloat) << where;
    EXPECT_EQ(got.labels.scalar_type(), torch::kLong) << where;
    ASSERT_EQ(got.images.sizes(), want.images.sizes()) << where;
    EXPECT_TRUE(torch::equal(got.labels.cpu(), want.labels.cpu())) << where;
    if (tolerance == 0) {
      EXPECT_TRUE(torch::equal(got.images.cpu(), want.images.cpu())) << where;
    } else {
      EXPECT_LE((got.images.cpu() - want.images.cpu()).abs().max().item<double>(), tolerance) << where;
    }
  }
}

TEST(DeviceEpochDataTest, WithoutAugmentationMatchesTheLoader) {
  const ImageDataset d = randomImages();
  for (bool shuffle : {true, false}) {
    LoaderOptions o = options();
    o.shuffle = shuffle;
    for (int64_t e : {0, 3}) expectSameAsLoader(d, o, e, "shuffle " + std::to_string(shuffle));
  }
}

TEST(DeviceEpochDataTest, CropFlipAndNormaliseMatchTheLoader) {
  const ImageDataset d = randomImages();
  // Padding 7 > H and W: some windows lie wholly in the zero padding.
  for (int64_t padding : {0, 2, 7}) {
    for (int mode = 0; mode < 3; ++mode) {  // crop + flip, crop only, flip only
      LoaderOptions o = augmented(8, padding);
      o.random_crop = mode != 2;
      o.random_flip = mode != 1;
      for (int64_t e : {0, 1}) {
        expectSameAsLoader(d, o, e, "padding " + std::to_string(padding) + " mode " + std::to_string(mode));
      }
    }
  }
  LoaderOptions o = augmented();
  o.mean.clear();
  o.std.clear();
  expectSameAsLoader(d, o, 0, "no normalisation");
}

TEST(DeviceEpochDataTest, RanksMatchTheLoaderWithAndWithoutEvenShards) {
  const ImageDataset d = randomImages();  // 103 samples: 3 ranks need padding
  for (bool even : {true, false}) {
    for (int64_t world : {2, 3}) {
      for (int64_t rank = 0; rank < world; ++rank) {
        LoaderOptions o = augmented(5);
        o.world_size = world;
        o.rank = rank;
        o.even_shards = even;
        expectSameAsLoader(d, o, 2,
                           "even " + std::to_string(even) + " rank " + std::to_string(rank) + "/" +
                               std::to_string(world));
      }
    }
  }
}

TEST(DeviceEpochDataTest, DropLastMatchesTheLoader) {
  const ImageDataset d = randomImages();
  for (int64_t world : {1, 3}) {
    LoaderOptions o = augmented(8);
    o.drop_last = true;
    o.world_size = world;
    o.rank = world - 1;
    expectSameAsLoader(d, o, 1, "drop_last world " + std::to_string(world));
    DeviceEpochData data(d, o);
    EXPECT_EQ(data.batchesPerEpoch(), data.samplesPerEpoch() / 8);
  }
  // Fewer samples than one batch: no batch at all.
  LoaderOptions o = options(200);
  o.drop_last = true;
  DeviceEpochData data(d, o);
  data.startEpoch(0);
  EXPECT_EQ(data.batchesPerEpoch(), 0);
  EXPECT_THROW(data.batch(0), ConfigError);
}

TEST(DeviceEpochDataTest, ChannelsLastDeliversTheSameValues) {
  const ImageDataset d = randomImages();
  for (bool augment : {false, true}) {
    LoaderOptions o = augment ? augmented() : options();
    o.channels_last = true;
    expectSameAsLoader(d, o, 0, "channels_last augment " + std::to_string(augment));
    DeviceEpochData data(d, o);
    data.startEpoch(0);
    for (int64_t k = 0; k < data.batchesPerEpoch(); ++k) {
      EXPECT_TRUE(data.batch(k).images.is_contiguous(torch::MemoryFormat::ChannelsLast)) << k;
    }
  }
}

TEST(DeviceEpochDataTest, BatchesAreViewsOfOneEpochTensor) {
  const ImageDataset d = randomImages();
  DeviceEpochData data(d, augmented());
  data.startEpoch(0);
  const Batch first = data.batch(0), last = data.batch(data.batchesPerEpoch() - 1);
  EXPECT_TRUE(first.images.is_alias_of(last.images));
  EXPECT_TRUE(first.labels.is_alias_of(last.labels));
  EXPECT_EQ(last.images.size(0), 103 - 12 * 8);
  // A new epoch builds fresh tensors: a kept batch is not overwritten.
  const torch::Tensor kept = first.images.clone();
  data.startEpoch(1);
  EXPECT_FALSE(data.batch(0).images.is_alias_of(first.images));
  EXPECT_TRUE(torch::equal(first.images, kept));
}

TEST(DeviceEpochDataTest, EpochsDifferWhenShufflingAndReproduce) {
  const ImageDataset d = randomImages();
  DeviceEpochData data(d, augmented());
  auto wholeEpoch = [&](int64_t e) {
    data.startEpoch(e);
    std::vector<torch::Tensor> images, labels;
    for (int64_t k = 0; k < data.batchesPerEpoch(); ++k) {
      images.push_back(data.batch(k).images);
      labels.push_back(data.batch(k).labels);
    }
    return std::make_pair(torch::cat(images), torch::cat(labels));
  };
  const auto [images0, labels0] = wholeEpoch(0);
  const auto [images1, labels1] = wholeEpoch(1);
  const auto [images0_again, labels0_again] = wholeEpoch(0);
  EXPECT_FALSE(torch::equal(labels0, labels1));
  EXPECT_FALSE(torch::equal(images0, images1));
  EXPECT_TRUE(torch::equal(labels0, labels0_again));
  EXPECT_TRUE(torch::equal(images0, images0_again));
  // Both epochs hold every sample once.
  EXPECT_TRUE(torch::equal(std::get<0>(torch::sort(labels0)), torch::arange(103, torch::kLong)));
  EXPECT_TRUE(torch::equal(std::get<0>(torch::sort(labels1)), torch::arange(103, torch::kLong)));
}

TEST(DeviceEpochDataTest, BadInputIsTheLoadersConfigError) {
  const ImageDataset d = randomImages(8);
  auto messageOf = [&](const ImageDataset& data, const LoaderOptions& o) -> std::string {
    try {
      DeviceEpochData device_data(data, o);
    } catch (const ConfigError& e) {
      return e.message();
    }
    return "no error";
  };
  LoaderOptions o = options(0);
  EXPECT_NE(messageOf(d, o).find("--batch-size must be > 0, got 0"), std::string::npos);
  o = options();
  o.world_size = 2;
  o.rank = 2;
  EXPECT_NE(messageOf(d, o).find("rank 2 is not in [0, 2)"), std::string::npos);
  o = options();
  o.mean = o.std = {0.5f};
  EXPECT_NE(messageOf(d, o).find("one value per channel (3)"), std::string::npos);
  o = options();
  o.crop_padding = -1;
  EXPECT_NE(messageOf(d, o).find("crop_padding"), std::string::npos);
  EXPECT_NE(messageOf(ImageDataset{}, options()).find("dataset is empty"), std::string::npos);
  if (!torch::cuda::is_available()) {
    o = options();
    o.device = torch::Device(torch::kCUDA, 0);
    EXPECT_NE(messageOf(d, o).find("CUDA is not available"), std::string::npos);
  }
  // The loader's threading options do not apply here.
  o = options();
  o.num_workers = -1;
  o.prefetch_batches = 0;
  EXPECT_EQ(messageOf(d, o), "no error");

  DeviceEpochData data(d, options(4));
  EXPECT_THROW(data.batch(0), ConfigError);  // before startEpoch
  data.startEpoch(0);
  EXPECT_NO_THROW(data.batch(1));
  EXPECT_THROW(data.batch(2), ConfigError);
  EXPECT_THROW(data.batch(-1), ConfigError);
}

// The same batches built on a GPU as the loader delivers there; skipped
// without one. Expected bitwise; the tolerance only allows for a last-bit
// difference between CPU and GPU float arithmetic.
TEST(DeviceEpochDataTest, CudaMatchesTheLoader) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const ImageDataset d = randomImages();
  for (bool channels_last : {false, true}) {
    LoaderOptions o = augmented(8, 3);
    o.device = torch::Device(torch::kCUDA, 0);
    o.channels_last = channels_last;
    o.world_size = 3;
    o.rank = 1;
    expectSameAsLoader(d, o, 4, "cuda channels_last " + std::to_string(channels_last), 1e-6);
  }
  // A big enough epoch for several chunks.
  const ImageDataset big = randomImages(2 * DeviceEpochData::kChunkSamples + 77, 3, 5, 4);
  expectSameAsLoader(big, augmented(512, 2), 0, "cuda chunks", 1e-6);
}

TEST(DeviceEpochDataTest, SeveralChunksMatchTheLoader) {
  const ImageDataset big = randomImages(DeviceEpochData::kChunkSamples + 77, 1, 3, 2);
  LoaderOptions o = augmented(1000, 1);
  o.mean = {0.5f};
  o.std = {0.3f};
  expectSameAsLoader(big, o, 0, "chunks");
}

}  // namespace
}  // namespace dtrain::data
