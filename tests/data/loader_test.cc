// DataLoader: sharding, determinism across worker counts and resumption,
// transforms, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "common/error.h"
#include "data/loader.h"
#include "data/synthetic_dataset.h"
#include "data/transforms.h"

namespace dtrain::data {
namespace {

ImageDataset numbered(int64_t n, int64_t channels = 1, int64_t side = 4) {
  ImageDataset d;
  d.images = torch::zeros({n, channels, side, side}, torch::kByte);
  for (int64_t i = 0; i < n; ++i) d.images[i].fill_(i % 256);
  d.labels = torch::arange(n, torch::kLong);
  return d;
}

std::vector<std::vector<int64_t>> epochLabels(DataLoader& loader, int64_t epoch, int64_t start = 0) {
  loader.startEpoch(epoch, start);
  std::vector<std::vector<int64_t>> batches;
  while (auto b = loader.next()) {
    auto l = b->labels.contiguous();
    batches.emplace_back(l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + l.numel());
  }
  return batches;
}

TEST(LoaderTest, UnevenShardsSeeEverySampleExactlyOnce) {
  for (int64_t world : {1, 3, 4}) {
    std::multiset<int64_t> seen;
    for (int64_t r = 0; r < world; ++r) {
      LoaderOptions o;
      o.batch_size = 8;
      o.rank = r;
      o.world_size = world;
      o.even_shards = false;
      DataLoader loader(numbered(101), o);
      for (auto& b : epochLabels(loader, 2)) seen.insert(b.begin(), b.end());
    }
    EXPECT_EQ(seen.size(), 101u) << world;
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 101u) << world;
  }
}

TEST(LoaderTest, EvenShardsPadLikeDistributedSampler) {
  std::multiset<int64_t> seen;
  for (int64_t r = 0; r < 4; ++r) {
    LoaderOptions o;
    o.batch_size = 10;
    o.rank = r;
    o.world_size = 4;
    DataLoader loader(numbered(101), o);
    EXPECT_EQ(loader.samplesPerEpoch(), 26);
    EXPECT_EQ(loader.batchesPerEpoch(), 3);
    for (auto& b : epochLabels(loader, 0)) seen.insert(b.begin(), b.end());
  }
  EXPECT_EQ(seen.size(), 104u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 101u);
}

TEST(LoaderTest, WorkerCountDoesNotChangeBatches) {
  LoaderOptions o;
  o.batch_size = 7;
  o.random_crop = o.random_flip = true;
  o.crop_padding = 1;
  std::vector<torch::Tensor> reference;
  for (int workers : {0, 1, 3}) {
    o.num_workers = workers;
    DataLoader loader(makeSyntheticDataset({.channels = 3, .height = 6, .width = 6, .size = 50}), o);
    loader.startEpoch(1);
    std::vector<torch::Tensor> images;
    while (auto b = loader.next()) images.push_back(b->images);
    if (reference.empty()) {
      reference = images;
      continue;
    }
    ASSERT_EQ(images.size(), reference.size());
    for (size_t i = 0; i < images.size(); ++i) EXPECT_TRUE(torch::equal(images[i], reference[i])) << workers;
  }
}

TEST(LoaderTest, ResumingMidEpochGivesTheTailOfTheEpoch) {
  LoaderOptions o;
  o.batch_size = 6;
  o.random_flip = o.random_crop = true;
  o.crop_padding = 1;
  DataLoader loader(makeSyntheticDataset({.channels = 1, .height = 5, .width = 5, .size = 40}), o);
  loader.startEpoch(3);
  std::vector<torch::Tensor> full;
  while (auto b = loader.next()) full.push_back(b->images);
  loader.startEpoch(3, 4);
  size_t i = 4;
  while (auto b = loader.next()) {
    EXPECT_EQ(b->index, static_cast<int64_t>(i));
    EXPECT_TRUE(torch::equal(b->images, full.at(i))) << "batch " << i;
    ++i;
  }
  EXPECT_EQ(i, full.size());
}

TEST(LoaderTest, EpochsShuffleDifferentlyAndReproduce) {
  LoaderOptions o;
  o.batch_size = 100;
  DataLoader loader(numbered(100), o);
  auto e0 = epochLabels(loader, 0), e1 = epochLabels(loader, 1), again = epochLabels(loader, 0);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, again);
  o.shuffle = false;
  DataLoader ordered(numbered(10), o);
  auto plain = epochLabels(ordered, 5);
  EXPECT_EQ(plain[0], (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(LoaderTest, DropLastDropsTheIncompleteBatch) {
  LoaderOptions o;
  o.batch_size = 8;
  o.drop_last = true;
  DataLoader loader(numbered(20), o);
  auto batches = epochLabels(loader, 0);
  EXPECT_EQ(batches.size(), 2u);
  for (auto& b : batches) EXPECT_EQ(b.size(), 8u);
}

TEST(LoaderTest, NormalisationFlipAndCrop) {
  ImageDataset d;
  d.images = torch::arange(16, torch::kByte).view({1, 1, 4, 4});
  d.labels = torch::zeros({1}, torch::kLong);
  LoaderOptions o;
  o.batch_size = 1;
  o.shuffle = false;
  o.mean = {0.5f};
  o.std = {0.25f};
  DataLoader loader(d, o);
  loader.startEpoch(0);
  auto b = loader.next();
  EXPECT_FLOAT_EQ(b->images[0][0][0][0].item<float>(), (0 / 255.f - 0.5f) / 0.25f);
  EXPECT_FLOAT_EQ(b->images[0][0][3][3].item<float>(), (15 / 255.f - 0.5f) / 0.25f);

  TransformSpec spec;
  spec.random_crop = true;
  spec.crop_padding = 2;
  spec.random_flip = true;
  for (int64_t idx = 0; idx < 64; ++idx) {
    const AugmentDraw draw = augmentDraw(spec, idx);
    torch::Tensor out = transformBatch(d.images, {idx}, spec);
    ASSERT_EQ(out.sizes(), d.images.sizes());
    // Every output pixel is either padding (0) or the source pixel the draw names.
    for (int64_t y = 0; y < 4; ++y) {
      for (int64_t x = 0; x < 4; ++x) {
        const int64_t sy = y + draw.dy - 2;
        const int64_t sx0 = draw.flip ? 3 - x : x;
        const int64_t sx = sx0 + draw.dx - 2;
        const float expected = (sy < 0 || sy > 3 || sx < 0 || sx > 3) ? 0.f : (sy * 4 + sx) / 255.f;
        ASSERT_FLOAT_EQ(out[0][0][y][x].item<float>(), expected) << idx << " " << y << "," << x;
      }
    }
  }
}

TEST(LoaderTest, ChannelsLastDelivered) {
  LoaderOptions o;
  o.batch_size = 4;
  o.channels_last = true;
  DataLoader loader(numbered(8, 3), o);
  loader.startEpoch(0);
  EXPECT_TRUE(loader.next()->images.is_contiguous(at::MemoryFormat::ChannelsLast));
}

TEST(LoaderTest, BadOptionsAreConfigErrors) {
  auto message = [](ImageDataset d, LoaderOptions o) {
    try {
      DataLoader loader(d, o);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  LoaderOptions o;
  o.batch_size = 0;
  EXPECT_NE(message(numbered(4), o).find("--batch-size must be > 0"), std::string::npos);
  o = LoaderOptions{};
  o.world_size = 4;
  o.rank = 1;
  EXPECT_NE(message(numbered(3), o).find("3 samples but the job has 4 ranks"), std::string::npos);
  o = LoaderOptions{};
  o.mean = {0.1f, 0.2f};
  o.std = {1.f, 1.f};
  EXPECT_NE(message(numbered(4), o).find("one value per channel"), std::string::npos);
  EXPECT_NE(message(ImageDataset{}, LoaderOptions{}).find("empty"), std::string::npos);
}

TEST(LoaderTest, AssemblyErrorSurfacesFromNext) {
  ImageDataset d = numbered(16);
  d.labels = d.labels.to(torch::kFloat);  // malformed: labels must be int64
  LoaderOptions o;
  o.batch_size = 4;
  DataLoader loader(d, o);
  loader.startEpoch(0);
  EXPECT_THROW(loader.next(), ConfigError);
}

TEST(LoaderTest, DestroyingMidEpochIsPrompt) {
  LoaderOptions o;
  o.batch_size = 2;
  o.num_workers = 3;
  o.prefetch_batches = 2;
  const auto start = std::chrono::steady_clock::now();
  {
    DataLoader loader(numbered(1000), o);
    loader.startEpoch(0);
    loader.next();
    loader.startEpoch(1);  // abandons epoch 0 with a full queue
    loader.next();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace dtrain::data
