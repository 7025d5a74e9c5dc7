// IDX (raw and gzipped), CIFAR-10 binary and synthetic datasets: written to a
// temp dir, read back, and broken on purpose to check the error messages.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/error.h"
#include "data/cifar_dataset.h"
#include "data/idx_dataset.h"
#include "data/synthetic_dataset.h"
#include "tests/data/idx_files.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::data {
namespace {

namespace fs = std::filesystem;
using testing::Bytes;
using testing::idxImages;
using testing::idxLabels;

class DatasetFilesTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::makeTempDir("dtrain-data-test"); }
  void TearDown() override { testing::removeTree(dir_.string()); }

  std::string write(const std::string& name, const Bytes& bytes) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return path;
  }
  std::string writeGz(const std::string& name, const Bytes& bytes) {
    std::string path = (dir_ / name).string();
    gzFile gz = gzopen(path.c_str(), "wb");
    EXPECT_NE(gz, nullptr);
    EXPECT_EQ(gzwrite(gz, bytes.data(), bytes.size()), static_cast<int>(bytes.size()));
    gzclose(gz);
    return path;
  }

  fs::path dir_;
};

void expectIdxImages(const torch::Tensor& images, int64_t n, int64_t h, int64_t w) {
  ASSERT_EQ(images.dtype(), torch::kUInt8);
  ASSERT_EQ(images.sizes(), (std::vector<int64_t>{n, 1, h, w}));
  auto a = images.accessor<uint8_t, 4>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < h * w; ++p) ASSERT_EQ(a[i][0][p / w][p % w], (i * 7 + p) % 256);
}

TEST_F(DatasetFilesTest, IdxRawAndGzippedReadBack) {
  auto raw = loadIdxImages(write("img", idxImages(5, 4, 3)));
  expectIdxImages(raw, 5, 4, 3);
  auto gz = loadIdxImages(writeGz("img.gz", idxImages(5, 4, 3)));
  EXPECT_TRUE(torch::equal(raw, gz));

  auto labels = loadIdxLabels(writeGz("lab.gz", idxLabels(13)), 10);
  ASSERT_EQ(labels.dtype(), torch::kLong);
  ASSERT_EQ(labels.size(0), 13);
  for (int64_t i = 0; i < 13; ++i) EXPECT_EQ(labels[i].item<int64_t>(), i % 10);
}

TEST_F(DatasetFilesTest, IdxSplitFindsRawAndGzippedFiles) {
  write("t10k-images-idx3-ubyte", idxImages(6, 2, 2));
  writeGz("t10k-labels-idx1-ubyte.gz", idxLabels(6));
  ImageDataset ds = loadIdxSplit(dir_.string(), /*train=*/false);
  EXPECT_EQ(ds.size(), 6);
  expectIdxImages(ds.images, 6, 2, 2);

  std::string msg = testing::configErrorOf([&] { loadIdxSplit(dir_.string(), /*train=*/true); });
  EXPECT_NE(msg.find(dir_.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("train-images-idx3-ubyte.gz"), std::string::npos) << msg;
}

TEST_F(DatasetFilesTest, IdxSplitCountMismatchIsConfigError) {
  write("train-images-idx3-ubyte", idxImages(6, 2, 2));
  write("train-labels-idx1-ubyte", idxLabels(5));
  std::string msg = testing::configErrorOf([&] { loadIdxSplit(dir_.string()); });
  EXPECT_NE(msg.find((dir_ / "train-images-idx3-ubyte").string() + " has 6 images but labels file " +
                     (dir_ / "train-labels-idx1-ubyte").string() + " has 5 labels; expected the same count"),
            std::string::npos)
      << msg;
}

TEST_F(DatasetFilesTest, TruncatedIdxNamesFileAndExpectedSize) {
  Bytes full = idxImages(10000, 28, 28);
  Bytes cut(full.begin(), full.begin() + 1000);
  std::string path = write("t10k-images-idx3-ubyte", cut);
  std::string msg = testing::configErrorOf([&] { loadIdxImages(path); });
  EXPECT_NE(msg.find(path + " has 1000 bytes; expected 7840016 for 10000 images of 28x28"),
            std::string::npos)
      << msg;

  // The same truncation inside a valid gzip stream.
  std::string gzpath = writeGz("t10k-images-idx3-ubyte.gz", cut);
  msg = testing::configErrorOf([&] { loadIdxImages(gzpath); });
  EXPECT_NE(msg.find(gzpath + " has 1000 bytes; expected 7840016"), std::string::npos) << msg;

  Bytes labels = idxLabels(100);
  labels.resize(50);
  path = write("labels", labels);
  msg = testing::configErrorOf([&] { loadIdxLabels(path, 10); });
  EXPECT_NE(msg.find(path + " has 50 bytes; expected 108 for 100 labels"), std::string::npos) << msg;

  path = write("tiny", Bytes{0, 0});
  msg = testing::configErrorOf([&] { loadIdxLabels(path, 10); });
  EXPECT_NE(msg.find(path + " has 2 bytes"), std::string::npos) << msg;
}

TEST_F(DatasetFilesTest, CutGzipStreamIsIoErrorNamingFile) {
  std::string full = writeGz("full.gz", idxImages(100, 28, 28));
  std::ifstream in(full, std::ios::binary);
  Bytes gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  gz.resize(gz.size() / 2);
  std::string path = write("cut.gz", gz);
  try {
    loadIdxImages(path);
    FAIL() << "no exception";
  } catch (const IoError& e) {
    std::cout << "cut gzip: " << e.message() << "\n";
    EXPECT_NE(e.message().find(path), std::string::npos) << e.message();
  } catch (const ConfigError& e) {
    // zlib versions that report a cut stream as EOF leave the size check.
    EXPECT_NE(e.message().find(path), std::string::npos) << e.message();
  }
}

TEST_F(DatasetFilesTest, BadMagicNamesFileAndExpectedMagic) {
  std::string path = write("labels-as-images", idxLabels(4));
  std::string msg = testing::configErrorOf([&] { loadIdxImages(path); });
  EXPECT_NE(msg.find(path + " has magic 0x00000801; expected 0x00000803"), std::string::npos) << msg;
}

TEST_F(DatasetFilesTest, MissingFileIsIoError) {
  EXPECT_THROW(loadIdxImages((dir_ / "nope").string()), IoError);
  EXPECT_THROW(loadCifarBatch((dir_ / "nope.bin").string()), IoError);
}

// n CIFAR records; label i = i % 10, pixel (i, p) = (i + p) % 256.
Bytes cifarRecords(int n) {
  Bytes b;
  for (int i = 0; i < n; ++i) {
    b.push_back(i % 10);
    for (int p = 0; p < 3072; ++p) b.push_back((i + p) % 256);
  }
  return b;
}

TEST_F(DatasetFilesTest, CifarBatchReadBack) {
  ImageDataset ds = loadCifarBatch(write("test_batch.bin", cifarRecords(4)));
  ASSERT_EQ(ds.images.sizes(), (std::vector<int64_t>{4, 3, 32, 32}));
  ASSERT_EQ(ds.labels.dtype(), torch::kLong);
  auto img = ds.images.accessor<uint8_t, 4>();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ds.labels[i].item<int64_t>(), i % 10);
    // Channel-major: pixel p = c*1024 + y*32 + x.
    EXPECT_EQ(img[i][0][0][0], i % 256);
    EXPECT_EQ(img[i][1][0][0], (i + 1024) % 256);
    EXPECT_EQ(img[i][2][31][31], (i + 3071) % 256);
  }
}

TEST_F(DatasetFilesTest, CifarSplitConcatenatesBatchesInOrder) {
  fs::create_directories(dir_ / "cifar-10-batches-bin");
  for (int b = 1; b <= 5; ++b) {
    Bytes rec = cifarRecords(2);
    rec[0] = b;  // mark each batch's first label
    write("cifar-10-batches-bin/data_batch_" + std::to_string(b) + ".bin", rec);
  }
  ImageDataset ds = loadCifarSplit(dir_.string(), /*train=*/true);
  ASSERT_EQ(ds.size(), 10);
  for (int b = 1; b <= 5; ++b) EXPECT_EQ(ds.labels[(b - 1) * 2].item<int64_t>(), b);

  std::string msg = testing::configErrorOf([&] { loadCifarSplit(dir_.string(), /*train=*/false); });
  EXPECT_NE(msg.find("test_batch.bin"), std::string::npos) << msg;
}

TEST_F(DatasetFilesTest, CifarBadSizeOrLabelNamesFile) {
  Bytes rec = cifarRecords(2);
  rec.pop_back();
  std::string path = write("data_batch_1.bin", rec);
  std::string msg = testing::configErrorOf([&] { loadCifarBatch(path); });
  EXPECT_NE(msg.find(path + " has 6145 bytes; expected a positive multiple of 3073"), std::string::npos)
      << msg;

  rec = cifarRecords(2);
  rec[3073] = 10;
  path = write("data_batch_2.bin", rec);
  msg = testing::configErrorOf([&] { loadCifarBatch(path); });
  EXPECT_NE(msg.find(path + " record 1 has label 10; expected 0..9"), std::string::npos) << msg;
}

TEST(FashionMnistTest, LoadsTestSplitWhenInstalled) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(fs::path(dir) / "t10k-images-idx3-ubyte.gz") &&
      !fs::exists(fs::path(dir) / "t10k-images-idx3-ubyte")) {
    GTEST_SKIP() << dir << " not installed";
  }
  ImageDataset ds = loadIdxSplit(dir, /*train=*/false);
  EXPECT_EQ(ds.images.sizes(), (std::vector<int64_t>{10000, 1, 28, 28}));
  EXPECT_EQ(ds.size(), 10000);
  EXPECT_EQ(ds.labels.min().item<int64_t>(), 0);
  EXPECT_EQ(ds.labels.max().item<int64_t>(), 9);
  // Fashion-MNIST's test split is balanced: 1000 per class.
  EXPECT_TRUE(torch::equal(torch::bincount(ds.labels), torch::full({10}, 1000, torch::kLong)));
}

TEST(SyntheticDatasetTest, DeterministicShapedAndSeedDependent) {
  SyntheticSpec spec{.channels = 1, .height = 8, .width = 6, .classes = 4, .seed = 42, .size = 50};
  ImageDataset a = makeSyntheticDataset(spec);
  ImageDataset b = makeSyntheticDataset(spec);
  ASSERT_EQ(a.images.sizes(), (std::vector<int64_t>{50, 1, 8, 6}));
  EXPECT_TRUE(torch::equal(a.images, b.images));
  EXPECT_TRUE(torch::equal(a.labels, b.labels));
  EXPECT_GE(a.labels.min().item<int64_t>(), 0);
  EXPECT_LE(a.labels.max().item<int64_t>(), 3);
  EXPECT_GT(std::get<0>(torch::_unique(a.labels)).size(0), 1);

  // Sample i does not depend on size.
  spec.size = 20;
  ImageDataset prefix = makeSyntheticDataset(spec);
  EXPECT_TRUE(torch::equal(prefix.images, a.images.slice(0, 0, 20)));

  spec.seed = 43;
  EXPECT_FALSE(torch::equal(makeSyntheticDataset(spec).images, prefix.images));

  spec.classes = 0;
  EXPECT_THROW(makeSyntheticDataset(spec), ConfigError);
}

}  // namespace
}  // namespace dtrain::data
