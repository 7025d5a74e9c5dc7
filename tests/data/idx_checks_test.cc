// Data files are checked, not trusted: hand-made IDX and CIFAR files that
// lie in one field each (header, size, labels, file type, gzip framing)
// must end in a ConfigError naming the file and the field, without
// blocking, and without reading or allocating more than the header promises.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <string>
#include <thread>

#include "common/error.h"
#include "data/cifar_dataset.h"
#include "data/idx_dataset.h"
#include "tests/data/idx_files.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain::data {
namespace {

using namespace dtrain::testing;  // NOLINT: the IDX builders and TempDir

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

// Caps this process's address space at what it uses now plus `headroom`,
// so a reader that trusts a file's size fails with bad_alloc instead of
// filling the machine's memory.
class AddressSpaceCap {
 public:
  explicit AddressSpaceCap(size_t headroom) {
    ::getrlimit(RLIMIT_AS, &saved_);
    std::ifstream status("/proc/self/status");
    std::string key;
    size_t kib = 0;
    while (status >> key && key != "VmSize:") status.ignore(1 << 20, '\n');
    status >> kib;
    rlimit capped = saved_;
    capped.rlim_cur = kib * 1024 + headroom;
    ::setrlimit(RLIMIT_AS, &capped);
  }
  ~AddressSpaceCap() { ::setrlimit(RLIMIT_AS, &saved_); }

 private:
  rlimit saved_{};
};

class IdxChecksTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_ / name; }
  std::string write(const std::string& name, const Bytes& bytes) { return writeFile(path(name), bytes); }
  // A split in dir_: images and labels, raw.
  void writeSplit(const std::string& prefix, const Bytes& images, const Bytes& labels) {
    write(prefix + "-images-idx3-ubyte", images);
    write(prefix + "-labels-idx1-ubyte", labels);
  }

  TempDir dir_{"dtrain-idx-checks"};
};

TEST_F(IdxChecksTest, LabelOutsideTheClassesNamesFileValueIndexAndRange) {
  Bytes labels = idxLabels(5);
  labels[8 + 3] = 200;
  writeSplit("train", idxImages(5, 2, 2), labels);
  std::string msg = testing::configErrorOf([&] { loadIdxSplit(dir_.path(), /*train=*/true); });
  EXPECT_HAS(msg, "labels file " + path("train-labels-idx1-ubyte") +
                      ": label 200 at index 3 is out of range; expected 0..9 (the data set has 10 classes)");

  // The test split too: evaluation would index the logits with it.
  labels = idxLabels(5);
  labels[8 + 4] = 10;
  writeSplit("t10k", idxImages(5, 2, 2), labels);
  msg = testing::configErrorOf([&] { loadIdxSplit(dir_.path(), /*train=*/false); });
  EXPECT_HAS(msg, "label 10 at index 4 is out of range; expected 0..9");
}

// Releases a reader stuck opening the FIFO (the bug this guards against)
// by opening the other end until the reader is done.
std::string withFifoReleased(std::future<std::string>& result, const std::string& fifo) {
  if (result.wait_for(std::chrono::seconds(3)) != std::future_status::ready) {
    ADD_FAILURE() << "the reader blocked on the FIFO " << fifo;
    while (result.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready) {
      int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
  }
  return result.get();
}

TEST_F(IdxChecksTest, FifoIsRefusedWithoutBlocking) {
  const std::string fifo = path("train-images-idx3-ubyte");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto result = std::async(std::launch::async, [&] { return testing::configErrorOf([&] { loadIdxImages(fifo); }); });
  EXPECT_HAS(withFifoReleased(result, fifo),
             "images file " + fifo + " is a FIFO (named pipe); expected a regular file");
}

TEST_F(IdxChecksTest, DevicesAndDirectoriesAreRefusedBeforeReading) {
  const std::string null_link = path("null-images");
  ASSERT_EQ(::symlink("/dev/null", null_link.c_str()), 0);
  std::string msg = testing::configErrorOf([&] { loadIdxImages(null_link); });
  ASSERT_NE(msg.find("images file " + null_link +
                     " (a link to /dev/null) is a character device; expected a regular file"),
            std::string::npos)
      << msg;

  // Only after the check above held: a reader that trusts it reads forever.
  const std::string zero_link = path("zero-images");
  ASSERT_EQ(::symlink("/dev/zero", zero_link.c_str()), 0);
  msg = testing::configErrorOf([&] { loadIdxImages(zero_link); });
  EXPECT_HAS(msg, "(a link to /dev/zero) is a character device");

  const std::string dir = path("a-directory");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  msg = testing::configErrorOf([&] { loadIdxImages(dir); });
  EXPECT_HAS(msg, "images file " + dir + " is a directory; expected a regular file");

  const std::string batch = path("data_batch_1.bin");
  ASSERT_EQ(::symlink("/dev/null", batch.c_str()), 0);
  msg = testing::configErrorOf([&] { loadCifarBatch(batch); });
  EXPECT_HAS(msg, "CIFAR-10 batch " + batch + " (a link to /dev/null) is a character device");
}

TEST_F(IdxChecksTest, RawSizeIsComparedWithTheHeaderBeforeReading) {
  // A 2 GiB sparse file behind a header promising 36 bytes: read whole, it
  // would not fit under the cap.
  const std::string big = write("big-images", idxImages(5, 2, 2));
  ASSERT_EQ(::truncate(big.c_str(), int64_t{2} << 30), 0);
  std::string msg;
  {
    AddressSpaceCap cap(size_t{256} << 20);
    msg = testing::configErrorOf([&] { loadIdxImages(big); });
  }
  EXPECT_HAS(msg, "images file " + big + " has 2147483648 bytes; expected 36 for 5 images of 2x2");

  Bytes longer = idxImages(5, 2, 2);
  longer.push_back(0);
  const std::string one_more = write("one-more", longer);
  EXPECT_HAS(testing::configErrorOf([&] { loadIdxImages(one_more); }),
             "images file " + one_more + " has 37 bytes; expected 36 for 5 images of 2x2");
}

TEST_F(IdxChecksTest, HeaderFieldsAreCheckedByName) {
  const std::string zero_images = write("zero-images", idxHeader(0x803, {0, 28, 28}));
  EXPECT_HAS(testing::configErrorOf([&] { loadIdxImages(zero_images); }),
             "images file " + zero_images + ": header says 0 images; expected at least 1");

  const std::string zero_rows = write("zero-rows", idxHeader(0x803, {5, 0, 28}));
  EXPECT_HAS(testing::configErrorOf([&] { loadIdxImages(zero_rows); }),
             "images file " + zero_rows + ": header says 0 rows; expected at least 1");

  // 4 x 2^31 x 2^31 wraps to 0 in 64 bits: the 16-byte header alone
  // would match it.
  const std::string wraps = write("wraps", idxHeader(0x803, {4, 1u << 31, 1u << 31}));
  EXPECT_HAS(testing::configErrorOf([&] { loadIdxImages(wraps); }),
             "images file " + wraps +
                 ": header says 4 images of 2147483648x2147483648: the dimension product overflows");
  const std::string huge = write("huge", idxHeader(0x803, {0xffffffff, 0xffffffff, 0xffffffff}));
  EXPECT_HAS(testing::configErrorOf([&] { loadIdxImages(huge); }), "the dimension product overflows");

  writeSplit("train", idxImages(3, 2, 3), idxLabels(3));
  EXPECT_HAS(testing::configErrorOf([&] { loadIdxSplit(dir_.path()); }),
             "images file " + path("train-images-idx3-ubyte") + ": rows 2 x cols 3: images must be square");

  writeSplit("t10k", idxImages(2, 2, 2), idxLabels(0));
  EXPECT_HAS(testing::configErrorOf([&] { loadIdxSplit(dir_.path(), /*train=*/false); }),
             "labels file " + path("t10k-labels-idx1-ubyte") + ": header says 0 labels; expected at least 1");
}

TEST_F(IdxChecksTest, GzipWithTrailingDataIsRefused) {
  const Bytes images = idxImages(5, 2, 2);
  const std::string junk = write("junk.gz", gzipped(images) + Bytes{'j', 'u', 'n', 'k'});
  std::string msg = testing::configErrorOf([&] { loadIdxImages(junk); });
  EXPECT_HAS(msg, "images file " + junk + ": 4 bytes of trailing data after its gzip stream");
  EXPECT_HAS(msg, "expected the file to end there");

  const std::string padded = write("padded.gz", gzipped(images) + Bytes(512, 0));
  EXPECT_HAS(testing::configErrorOf([&] { loadIdxImages(padded); }), "512 bytes of trailing data");

  const std::string batch = write("test_batch.bin", gzipped(Bytes(kCifarRecordBytes, 1)) + Bytes{'x'});
  EXPECT_HAS(testing::configErrorOf([&] { loadCifarBatch(batch); }),
             "CIFAR-10 batch " + batch + ": 1 bytes of trailing data");

  // Concatenated members are gzip as RFC 1952 defines it, not junk.
  const Bytes first(images.begin(), images.begin() + 20), rest(images.begin() + 20, images.end());
  const std::string members = write("members.gz", gzipped(first) + gzipped(rest));
  EXPECT_TRUE(torch::equal(loadIdxImages(members), loadIdxImages(write("plain", images))));
}

TEST_F(IdxChecksTest, GzipIsDecompressedNoFurtherThanTheHeaderPromises) {
  const std::string longer = write("longer.gz", gzipped(idxImages(1, 2, 2) + Bytes(size_t{16} << 20, 0)));
  EXPECT_HAS(testing::configErrorOf([&] { loadIdxImages(longer); }),
             "images file " + longer +
                 " has more than 20 bytes; expected 20 for 1 images of 2x2 (sizes after gunzip)");

  // A promise of 78 GB in a few bytes of gzip is not allocated.
  const std::string promise = write("promise.gz", gzipped(idxHeader(0x803, {100000000, 28, 28})));
  std::string msg;
  {
    AddressSpaceCap cap(size_t{256} << 20);
    msg = testing::configErrorOf([&] { loadIdxImages(promise); });
  }
  EXPECT_HAS(msg, "images file " + promise + " has 16 bytes; expected 78400000016 for 100000000 images of 28x28");
}

}  // namespace
}  // namespace dtrain::data
