// DataLoader: sharding against DistributedSampler, determinism across worker
// counts and mid-epoch resumption, transforms' arithmetic and geometry,
// errors, and cancellation.
#include <gtest/gtest.h>

#include <torch/cuda.h>

#include <chrono>
#include <set>
#include <thread>

#include "common/error.h"
#include "data/distributed_sampler.h"
#include "data/loader.h"
#include "data/synthetic_dataset.h"
#include "data/transforms.h"

namespace dtrain::data {
namespace {

using Labels = std::vector<int64_t>;

// Sample i is filled with i % 256 and labelled i, so a label names its index.
ImageDataset numbered(int64_t n, int64_t channels = 1, int64_t side = 4) {
  ImageDataset d;
  d.images = torch::arange(n, torch::kLong).remainder(256).to(torch::kByte).view({n, 1, 1, 1})
                 .expand({n, channels, side, side}).contiguous();
  d.labels = torch::arange(n, torch::kLong);
  return d;
}

ImageDataset synthetic(int64_t n, int64_t channels = 3, int64_t side = 6) {
  return makeSyntheticDataset({.channels = channels, .height = side, .width = side, .seed = 5, .size = n});
}

std::vector<Batch> epoch(DataLoader& loader, int64_t e, int64_t start = 0) {
  loader.startEpoch(e, start);
  std::vector<Batch> out;
  while (auto b = loader.next()) out.push_back(std::move(*b));
  return out;
}

Labels labelsOf(const std::vector<Batch>& batches) {
  Labels all;
  for (const Batch& b : batches) {
    torch::Tensor l = b.labels.contiguous();
    all.insert(all.end(), l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + l.numel());
  }
  return all;
}

void expectSameBatches(const std::vector<Batch>& a, const std::vector<Batch>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].index, b[i].index) << what;
    EXPECT_EQ(a[i].samples_before, b[i].samples_before) << what;
    EXPECT_TRUE(torch::equal(a[i].labels, b[i].labels)) << what << " batch " << i;
    EXPECT_TRUE(torch::equal(a[i].images, b[i].images)) << what << " batch " << i;
  }
}

LoaderOptions withBatch(int64_t batch_size) {
  LoaderOptions o;
  o.batch_size = batch_size;
  return o;
}

TEST(LoaderTest, UnevenShardsSeeEverySampleExactlyOnceAcrossRanks) {
  for (bool shuffle : {true, false}) {
    for (int64_t world : {1, 3, 4}) {
      Labels seen;
      int64_t total = 0;
      for (int64_t r = 0; r < world; ++r) {
        LoaderOptions o = withBatch(8);
        o.shuffle = shuffle;
        o.rank = r;
        o.world_size = world;
        o.even_shards = false;
        DataLoader loader(numbered(101), o);
        const auto batches = epoch(loader, 2);
        const Labels mine = labelsOf(batches);
        EXPECT_EQ(static_cast<int64_t>(mine.size()), loader.samplesPerEpoch());
        EXPECT_EQ(static_cast<int64_t>(batches.size()), loader.batchesPerEpoch());
        for (size_t i = 0; i < batches.size(); ++i) {
          EXPECT_EQ(batches[i].index, static_cast<int64_t>(i));
          EXPECT_EQ(batches[i].samples_before, static_cast<int64_t>(i) * 8);
        }
        total += loader.samplesPerEpoch();
        seen.insert(seen.end(), mine.begin(), mine.end());
      }
      EXPECT_EQ(total, 101) << world;
      std::multiset<int64_t> counted(seen.begin(), seen.end());
      EXPECT_EQ(counted.size(), 101u) << world;
      EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()), (std::set<int64_t>(counted.begin(), counted.end())));
      for (int64_t i = 0; i < 101; ++i) EXPECT_EQ(counted.count(i), 1u) << "sample " << i << " world " << world;
    }
  }
}

TEST(LoaderTest, EvenShardsAreDistributedSamplerOrder) {
  for (bool shuffle : {true, false}) {
    int64_t total = 0;
    std::set<int64_t> distinct;
    for (int64_t r = 0; r < 4; ++r) {
      LoaderOptions o = withBatch(10);
      o.shuffle = shuffle;
      o.seed = 9;
      o.rank = r;
      o.world_size = 4;
      DataLoader loader(numbered(101), o);
      EXPECT_EQ(loader.samplesPerEpoch(), 26);
      EXPECT_EQ(loader.batchesPerEpoch(), 3);
      DistributedSampler sampler(101, 4, r, shuffle, 9);
      sampler.set_epoch(7);
      const Labels mine = labelsOf(epoch(loader, 7));
      EXPECT_EQ(mine, sampler.indices()) << "rank " << r;
      total += static_cast<int64_t>(mine.size());
      distinct.insert(mine.begin(), mine.end());
    }
    EXPECT_EQ(total, 104);  // padded to ceil(101 / 4) * 4
    EXPECT_EQ(distinct.size(), 101u);
  }
}

TEST(LoaderTest, WorkerCountDoesNotChangeBatches) {
  LoaderOptions o = withBatch(7);
  o.random_crop = o.random_flip = true;
  o.crop_padding = 2;
  o.mean = {0.4f, 0.5f, 0.6f};
  o.std = {0.2f, 0.25f, 0.3f};
  o.num_workers = 0;
  DataLoader serial(synthetic(50), o);
  const auto reference = epoch(serial, 1);
  ASSERT_EQ(reference.size(), 8u);
  for (int workers : {1, 3}) {
    for (int prefetch : {1, 4}) {
      o.num_workers = workers;
      o.prefetch_batches = prefetch;
      DataLoader loader(synthetic(50), o);
      expectSameBatches(epoch(loader, 1), reference,
                        std::to_string(workers) + " workers, prefetch " + std::to_string(prefetch));
    }
  }
}

TEST(LoaderTest, ResumingMidEpochGivesTheTailOfTheEpoch) {
  for (int workers : {0, 2}) {
    LoaderOptions o = withBatch(6);
    o.random_flip = o.random_crop = true;
    o.crop_padding = 1;
    o.num_workers = workers;
    o.world_size = 2;
    o.rank = 1;
    DataLoader loader(synthetic(40, 1, 5), o);
    const auto full = epoch(loader, 3);
    ASSERT_EQ(full.size(), 4u);
    for (int64_t k = 0; k <= 4; ++k) {
      const auto tail = epoch(loader, 3, k);
      expectSameBatches(tail, std::vector<Batch>(full.begin() + k, full.end()),
                        "start " + std::to_string(k) + ", " + std::to_string(workers) + " workers");
    }
    EXPECT_THROW(loader.startEpoch(3, 5), ConfigError);
    EXPECT_THROW(loader.startEpoch(3, -1), ConfigError);
  }
}

TEST(LoaderTest, EpochsShuffleAndAugmentDifferentlyAndReproduce) {
  DataLoader loader(numbered(100), withBatch(100));
  const Labels e0 = labelsOf(epoch(loader, 0)), e1 = labelsOf(epoch(loader, 1));
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, labelsOf(epoch(loader, 0)));

  LoaderOptions plain = withBatch(10);
  plain.shuffle = false;
  DataLoader ordered(numbered(10), plain);
  EXPECT_EQ(labelsOf(epoch(ordered, 5)), (Labels{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));

  TransformSpec a{.random_crop = true, .random_flip = true, .seed = 1, .epoch = 0};
  TransformSpec b = a, c = a;
  b.epoch = 1;
  c.seed = 2;
  int differ_epoch = 0, differ_seed = 0, flips = 0;
  for (int64_t i = 0; i < 200; ++i) {
    const AugmentDraw da = augmentDraw(a, i), db = augmentDraw(b, i), dc = augmentDraw(c, i);
    differ_epoch += da.dy != db.dy || da.dx != db.dx || da.flip != db.flip;
    differ_seed += da.dy != dc.dy || da.dx != dc.dx || da.flip != dc.flip;
    flips += da.flip;
    EXPECT_TRUE(da.dy >= 0 && da.dy <= 8 && da.dx >= 0 && da.dx <= 8);
  }
  EXPECT_GT(differ_epoch, 150);
  EXPECT_GT(differ_seed, 150);
  EXPECT_GT(flips, 70);  // p = 0.5 over 200 draws
  EXPECT_LT(flips, 130);
}

TEST(LoaderTest, DropLastDropsOnlyTheIncompleteBatch) {
  LoaderOptions o = withBatch(8);
  DataLoader keep(numbered(20), o);
  EXPECT_EQ(keep.batchesPerEpoch(), 3);
  const auto kept = epoch(keep, 0);
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[2].labels.size(0), 4);
  EXPECT_EQ(kept[2].samples_before, 16);

  o.drop_last = true;
  DataLoader drop(numbered(20), o);
  EXPECT_EQ(drop.batchesPerEpoch(), 2);
  const auto dropped = epoch(drop, 0);
  ASSERT_EQ(dropped.size(), 2u);
  for (const auto& b : dropped) EXPECT_EQ(b.labels.size(0), 8);
  o.world_size = 2;  // 10 per rank: one batch of 8
  DataLoader ranked(numbered(20), o);
  EXPECT_EQ(epoch(ranked, 0).size(), 1u);
}

TEST(LoaderTest, NormalisesPerChannelAfterScaling) {
  ImageDataset d;
  d.images = torch::tensor({0, 51, 255}, torch::kByte).view({1, 3, 1, 1}).expand({1, 3, 2, 2}).contiguous();
  d.labels = torch::zeros({1}, torch::kLong);
  LoaderOptions o = withBatch(1);
  o.mean = {0.5f, 0.2f, 1.0f};
  o.std = {0.25f, 0.5f, 2.0f};
  DataLoader loader(d, o);
  const auto b = epoch(loader, 0).at(0);
  ASSERT_EQ(b.images.scalar_type(), torch::kFloat);
  ASSERT_EQ(b.images.sizes(), (std::vector<int64_t>{1, 3, 2, 2}));
  EXPECT_FLOAT_EQ(b.images[0][0][1][1].item<float>(), -2.0f);  // (0 - 0.5) / 0.25
  EXPECT_FLOAT_EQ(b.images[0][1][0][1].item<float>(), 0.0f);   // (0.2 - 0.2) / 0.5
  EXPECT_FLOAT_EQ(b.images[0][2][1][0].item<float>(), 0.0f);   // (1 - 1) / 2
  o.mean.clear();
  o.std.clear();
  DataLoader raw(d, o);
  EXPECT_FLOAT_EQ(epoch(raw, 0).at(0).images[0][1][0][0].item<float>(), 0.2f);  // 51 / 255
}

// A 4x4 image holding 1..16 row-major, so a pixel names its source.
torch::Tensor handMade() { return torch::arange(1, 17, torch::kByte).view({1, 1, 4, 4}); }

TEST(LoaderTest, FlipMirrorsAndCropPadsWithZeros) {
  const torch::Tensor image = handMade();
  const torch::Tensor scaled = image.to(torch::kFloat) / 255.0;
  TransformSpec flip_only{.random_flip = true};
  TransformSpec crop_only{.random_crop = true, .crop_padding = 2};
  bool saw_flip = false, saw_plain = false, saw_corner = false;
  for (int64_t idx = 0; idx < 64; ++idx) {
    const torch::Tensor flipped = transformBatch(image, {idx}, flip_only);
    if (augmentDraw(flip_only, idx).flip) {
      saw_flip = true;
      EXPECT_TRUE(torch::equal(flipped, scaled.flip({3})));
      EXPECT_FLOAT_EQ(flipped[0][0][0][0].item<float>(), 4 / 255.0f);
    } else {
      saw_plain = true;
      EXPECT_TRUE(torch::equal(flipped, scaled));
    }
    const AugmentDraw d = augmentDraw(crop_only, idx);
    EXPECT_FALSE(d.flip);
    const torch::Tensor cropped = transformBatch(image, {idx}, crop_only);
    ASSERT_EQ(cropped.sizes(), image.sizes());
    if (d.dy == 0 && d.dx == 0) {  // window at the padded image's top-left
      saw_corner = true;
      EXPECT_EQ(cropped[0][0].slice(0, 0, 2).abs().sum().item<float>(), 0.f);
      EXPECT_EQ(cropped[0][0].slice(1, 0, 2).abs().sum().item<float>(), 0.f);
      EXPECT_TRUE(torch::equal(cropped[0][0].slice(0, 2).slice(1, 2), scaled[0][0].slice(0, 0, 2).slice(1, 0, 2)));
    }
  }
  EXPECT_TRUE(saw_flip && saw_plain && saw_corner);

  // Both at once: every pixel is padding (0) or the source pixel the draw names.
  TransformSpec both{.random_crop = true, .crop_padding = 2, .random_flip = true, .seed = 3};
  for (int64_t idx = 0; idx < 64; ++idx) {
    const AugmentDraw d = augmentDraw(both, idx);
    const torch::Tensor out = transformBatch(image, {idx}, both);
    for (int64_t y = 0; y < 4; ++y) {
      for (int64_t x = 0; x < 4; ++x) {
        const int64_t sy = y + d.dy - 2, sx = (d.flip ? 3 - x : x) + d.dx - 2;
        const float expected = (sy < 0 || sy > 3 || sx < 0 || sx > 3) ? 0.f : (sy * 4 + sx + 1) / 255.f;
        ASSERT_FLOAT_EQ(out[0][0][y][x].item<float>(), expected) << idx << " at " << y << "," << x;
      }
    }
  }
}

TEST(LoaderTest, LoaderAppliesTheDrawOfEachSamplesDatasetIndex) {
  LoaderOptions o = withBatch(5);
  o.random_crop = o.random_flip = true;
  o.crop_padding = 3;
  o.seed = 11;
  ImageDataset d = synthetic(20, 2, 7);
  DataLoader loader(d, o);
  const TransformSpec spec{.random_crop = true, .crop_padding = 3, .random_flip = true, .seed = 11, .epoch = 4};
  for (const Batch& b : epoch(loader, 4)) {
    for (int64_t i = 0; i < b.labels.size(0); ++i) {
      // Synthetic labels are classes; find the sample by its pixels instead.
      bool matched = false;
      for (int64_t idx = 0; idx < 20 && !matched; ++idx) {
        matched = torch::equal(b.images[i], transformBatch(d.images.slice(0, idx, idx + 1), {idx}, spec)[0]);
      }
      EXPECT_TRUE(matched) << "batch " << b.index << " sample " << i;
    }
  }
}

TEST(LoaderTest, ChannelsLastDeliversTheSameValues) {
  LoaderOptions o = withBatch(4);
  o.random_crop = o.random_flip = true;
  o.mean = {0.1f, 0.2f, 0.3f};
  o.std = {1.f, 2.f, 3.f};
  DataLoader plain(synthetic(12), o);
  o.channels_last = true;
  DataLoader last(synthetic(12), o);
  const auto a = epoch(plain, 0), b = epoch(last, 0);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(b[i].images.is_contiguous(at::MemoryFormat::ChannelsLast));
    EXPECT_TRUE(a[i].images.is_contiguous());
    EXPECT_TRUE(torch::equal(a[i].images, b[i].images));
  }
}

TEST(LoaderTest, CpuBatchesAreNeitherPinnedNorCopied) {
  DataLoader loader(numbered(8), withBatch(4));  // pin_memory defaults to true
  const auto batches = epoch(loader, 0);
  EXPECT_TRUE(batches[0].images.device().is_cpu());
  EXPECT_FALSE(batches[0].images.is_pinned());
  EXPECT_FALSE(batches[0].labels.is_pinned());
}

std::string configError(ImageDataset d, LoaderOptions o) {
  try {
    DataLoader loader(std::move(d), std::move(o));
  } catch (const ConfigError& e) {
    return e.message();
  }
  return "no error";
}

TEST(LoaderTest, BadInputIsAConfigErrorNamingIt) {
  auto expectMessage = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << message << "' lacks '" << part << "'";
  };
  LoaderOptions o = withBatch(0);
  expectMessage(configError(numbered(4), o), "--batch-size must be > 0, got 0");
  o = withBatch(-3);
  expectMessage(configError(numbered(4), o), "--batch-size must be > 0, got -3");
  o = LoaderOptions{};
  o.world_size = 4;
  o.rank = 1;
  expectMessage(configError(numbered(3), o), "dataset has 3 samples but 4 ranks");
  o.rank = 4;
  expectMessage(configError(numbered(8), o), "rank 4 is not in [0, 4)");
  o = LoaderOptions{};
  o.mean = {0.1f, 0.2f};
  o.std = {1.f, 1.f};
  expectMessage(configError(numbered(4, 3), o), "one value per channel (3), got 2/2");
  o.mean = o.std = {0.5f};
  o.std = {0.f};
  expectMessage(configError(numbered(4), o), "std values must be > 0");
  o = LoaderOptions{};
  o.num_workers = -1;
  expectMessage(configError(numbered(4), o), "num_workers");
  o = LoaderOptions{};
  o.prefetch_batches = 0;
  expectMessage(configError(numbered(4), o), "prefetch_batches");
  o = LoaderOptions{};
  o.crop_padding = -1;
  expectMessage(configError(numbered(4), o), "crop_padding");
  expectMessage(configError(ImageDataset{}, LoaderOptions{}), "dataset is empty");

  ImageDataset bad = numbered(16);
  bad.labels = bad.labels.to(torch::kFloat);
  expectMessage(configError(bad, LoaderOptions{}), "labels are Float [16]");
  bad = numbered(16);
  bad.labels = bad.labels.slice(0, 0, 15);
  expectMessage(configError(bad, LoaderOptions{}), "expected int64 [16]");
  bad = numbered(16);
  bad.images = bad.images.to(torch::kFloat);
  expectMessage(configError(bad, LoaderOptions{}), "images are Float");
  if (!torch::cuda::is_available()) {
    o = LoaderOptions{};
    o.device = torch::Device(torch::kCUDA, 0);
    expectMessage(configError(numbered(4), o), "CUDA is not available");
  }
}

TEST(LoaderTest, AssemblyErrorSurfacesFromNextAtItsBatch) {
  for (int workers : {0, 1, 3}) {
    ImageDataset d = numbered(16);
    torch::Tensor images = d.images;  // shares the loader's storage
    LoaderOptions o = withBatch(4);
    o.shuffle = false;
    o.num_workers = workers;
    DataLoader loader(d, o);
    images.resize_({6, 1, 4, 4});  // corrupt the data under the loader: rows 6.. are gone
    loader.startEpoch(0);
    ASSERT_TRUE(loader.next().has_value()) << workers;  // rows 0..3
    EXPECT_ANY_THROW(loader.next()) << workers;         // rows 4..7
    EXPECT_ANY_THROW(loader.next()) << workers;         // and it stays failed
    loader.startEpoch(0, 3);                            // rows 12..15: the failure is per epoch
    EXPECT_ANY_THROW(loader.next()) << workers;
  }
}

TEST(LoaderTest, CancellingWithAFullQueueIsPrompt) {
  LoaderOptions o = withBatch(2);
  o.num_workers = 3;
  o.prefetch_batches = 2;
  o.random_crop = true;
  DataLoader fresh(synthetic(1000), o);
  const auto expected = epoch(fresh, 1);
  const auto start = std::chrono::steady_clock::now();
  {
    DataLoader loader(synthetic(1000), o);
    loader.startEpoch(0);
    ASSERT_TRUE(loader.next().has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the queue fill
    expectSameBatches(epoch(loader, 1), expected, "after abandoning epoch 0");
    loader.startEpoch(2);
    ASSERT_TRUE(loader.next().has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }  // destroyed mid-epoch with workers blocked on the full queue
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(LoaderTest, CudaBatchesMatchCpuBatches) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA";
  LoaderOptions o = withBatch(16);
  o.random_crop = o.random_flip = true;
  o.mean = {0.5f, 0.5f, 0.5f};
  o.std = {0.25f, 0.25f, 0.25f};
  o.channels_last = true;
  DataLoader cpu(synthetic(100), o);
  o.device = torch::Device(torch::kCUDA, 0);
  for (bool pin : {true, false}) {
    o.pin_memory = pin;
    DataLoader gpu(synthetic(100), o);
    const auto a = epoch(cpu, 2), b = epoch(gpu, 2);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(b[i].images.is_cuda() && b[i].labels.is_cuda());
      EXPECT_TRUE(b[i].images.is_contiguous(at::MemoryFormat::ChannelsLast));
      EXPECT_TRUE(torch::equal(a[i].images, b[i].images.cpu())) << "pin " << pin << " batch " << i;
      EXPECT_TRUE(torch::equal(a[i].labels, b[i].labels.cpu())) << "pin " << pin << " batch " << i;
    }
  }
}

}  // namespace
}  // namespace dtrain::data
