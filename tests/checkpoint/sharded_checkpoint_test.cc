// The sharded checkpoint format without a training job: shards and
// metadata written here by the format's own writers, read back across
// shard boundaries, whole, under aliases and in a storage order; what an
// incomplete one lacks, named; damaged shards and metadata as clear
// errors naming the file; listing and pruning next to single files.
#include <gtest/gtest.h>
#include <unistd.h>

#include "checkpoint/checkpoint_file_writer.h"
#include "checkpoint/checkpoint_sharded.h"
#include "checkpoint_test_util.h"
#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "dtrain/checkpoint.h"

namespace dtrain {
namespace {

using testing::configErrorOf;
using testing::readFile;
using testing::TempDir;
using testing::writeFile;

// The logical tensors of the sample checkpoint.
struct Sample {
  torch::Tensor a = torch::arange(6, torch::kFloat).reshape({2, 3}) + 0.25;
  torch::Tensor b = torch::arange(5, torch::kLong) * 7;
  // Stored permuted: its dimensions lie as (1, 0) in the files.
  torch::Tensor p = torch::arange(6, torch::kDouble).reshape({2, 3}) - 1.5;
};

// Writes <parent>/ckpt-<step 9 digits>/ as two ranks would: "a" split
// across both shards, "b" whole in shard 1, "p" split in storage order,
// "c" an alias of "a". Returns the directory.
std::string writeSharded(const std::string& parent, int64_t step, const Sample& s = {}) {
  const std::string dir = parent + "/" + checkpointStem("ckpt", step);
  EXPECT_EQ(makeDirectories(dir), 0);
  const torch::Tensor a = s.a.reshape({-1}), stored_p = s.p.t().contiguous().reshape({-1});
  const auto piece = [](const torch::Tensor& t, int64_t begin, int64_t count) {
    const torch::Tensor view = t.narrow(0, begin, count);
    return TensorToWrite{"", view.scalar_type(), {count}, [view] { return view; }};
  };
  std::vector<TensorToWrite> shard0 = {piece(a, 0, 4), piece(stored_p, 0, 3)};
  shard0[0].name = "a";
  shard0[1].name = "p";
  std::vector<TensorToWrite> shard1 = {piece(a, 4, 2), piece(s.b, 0, 5), piece(stored_p, 3, 3)};
  shard1[0].name = "a";
  shard1[1].name = "b";
  shard1[2].name = "p";
  const WrittenFile w0 = writeCheckpointFile(dir + "/" + shardFileName(0, 2), {{"shard", 0}}, shard0);
  const WrittenFile w1 = writeCheckpointFile(dir + "/" + shardFileName(1, 2), {{"shard", 1}}, shard1);
  ShardedMetadata md;
  md.meta = {{"step", step}, {"tensor_layout", "parameters"}};
  md.world_size = 2;
  md.stage = "gradients";
  md.tensors = {{"a", torch::kFloat, {2, 3}, {}}, {"b", torch::kLong, {5}, {}}, {"p", torch::kDouble, {2, 3}, {1, 0}}};
  md.aliases = {{"c", "a"}};
  md.shards = {{shardFileName(0, 2), w0.bytes, w0.crc, {{"a", 0, 4}, {"p", 0, 3}}},
               {shardFileName(1, 2), w1.bytes, w1.crc, {{"a", 4, 2}, {"b", 0, 5}, {"p", 3, 3}}}};
  writeShardedMetadata(dir, md);
  return dir;
}

template <typename Fn>
std::string errorOf(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  return "(no error)";
}

TEST(ShardedCheckpointTest, ReadsRangesAcrossShardsWholeUnderAliasesAndInStorageOrder) {
  TempDir parent;
  const Sample s;
  const std::string dir = writeSharded(parent.path(), 5);
  EXPECT_TRUE(missingCheckpointParts(dir).empty());
  for (const std::string& path : {dir, dir + "/metadata.dtck", dir + "/"}) {
    const CheckpointReader reader(path);
    EXPECT_EQ(reader.path(), dir);
    EXPECT_TRUE(reader.sharded());
    EXPECT_EQ(reader.worldSize(), 2);
    EXPECT_EQ(reader.stage(), "gradients");
    EXPECT_EQ(reader.meta().at("step"), 5);
    ASSERT_EQ(reader.tensors().size(), 3u);
    EXPECT_EQ(reader.files().size(), 3u);  // two shards and the metadata
    reader.verify();
    float middle[3];
    reader.read("a", 2, 3, middle);  // elements 2, 3 in shard 0 and 4 in shard 1
    EXPECT_EQ(std::vector<float>(middle, middle + 3), (std::vector<float>{2.25f, 3.25f, 4.25f}));
    EXPECT_TRUE(torch::equal(reader.readTensor("a"), s.a));
    EXPECT_TRUE(torch::equal(reader.readTensor("c"), s.a));
    EXPECT_TRUE(torch::equal(reader.readTensor("b"), s.b));
    EXPECT_TRUE(torch::equal(reader.readTensor("p"), s.p));
    EXPECT_EQ(reader.find("c")->name, "a");
    EXPECT_EQ(reader.find("nope"), nullptr);
  }
  const CheckpointState whole = loadCheckpoint(dir);
  EXPECT_EQ(whole.tensors.size(), 4u);  // a, b, c (the alias), p
  EXPECT_TRUE(torch::equal(whole.tensors.at("c"), s.a));
  EXPECT_TRUE(torch::equal(whole.tensors.at("p"), s.p));
}

// The metadata is written last: without it the write was cut short, and
// the checkpoint is skipped as unfinished. With it, a shard missing or cut
// is damage (its data is lost), never "unfinished".
TEST(ShardedCheckpointTest, AnIncompleteCheckpointNamesWhatItLacksAndIsSkipped) {
  TempDir parent;
  Checkpointer({.dir = parent.path(), .keep = 5}).save(3, {{{"a", Sample().a}}, {{"step", 3}}});
  const std::string dir = writeSharded(parent.path(), 5);
  const std::string bytes = readFile(dir + "/" + shardFileName(1, 2));
  writeFile(dir + "/" + shardFileName(1, 2), bytes.substr(0, bytes.size() - 7));
  EXPECT_TRUE(missingCheckpointParts(dir).empty());
  EXPECT_EQ(errorOf([&] { CheckpointReader reader(dir); }),
            "checkpoint " + dir + " is damaged: " + shardFileName(1, 2) + " has " + std::to_string(bytes.size() - 7) +
                " bytes, expected " + std::to_string(bytes.size()) + " (its metadata.dtck says the write finished)");
  ::unlink((dir + "/" + shardFileName(1, 2)).c_str());
  EXPECT_TRUE(missingCheckpointParts(dir).empty());
  EXPECT_NE(errorOf([&] { CheckpointReader reader(dir); }).find(dir + " is damaged: rank-00001-of-00002.dtck missing"),
            std::string::npos);
  ::unlink((dir + "/metadata.dtck").c_str());
  EXPECT_EQ(missingCheckpointParts(dir),
            (std::vector<std::string>{"metadata.dtck missing", "rank-00001-of-00002.dtck missing"}));

  setLogLevel(LogLevel::kInfo);
  ::testing::internal::CaptureStderr();
  const auto newest = newestCompleteCheckpoint(parent.path());
  const auto latest = Checkpointer({.dir = parent.path()}).loadLatestValid();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(newest, parent / "ckpt-000000003.dtck");
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->first, parent / "ckpt-000000003.dtck");
  EXPECT_NE(log.find("ckpt-000000005: metadata.dtck missing, rank-00001-of-00002.dtck missing; skipped"),
            std::string::npos)
      << log;
}

TEST(ShardedCheckpointTest, DamagedShardsAndMetadataAreErrorsNamingTheFile) {
  TempDir parent;
  const std::string dir = writeSharded(parent.path(), 5);
  const std::string shard = dir + "/" + shardFileName(0, 2);
  const std::string good = readFile(shard);

  std::string flipped = good;
  flipped[flipped.size() - 30] ^= 1;  // in the data: sizes hold, the CRC does not
  writeFile(shard, flipped);
  EXPECT_TRUE(missingCheckpointParts(dir).empty());
  EXPECT_EQ(errorOf([&] { CheckpointReader(dir).verify(); }), shard + ": checksum mismatch (file is corrupt)");
  EXPECT_NE(errorOf([&] { loadCheckpoint(dir); }).find(shard + ": checksum mismatch"), std::string::npos);

  // Another write's shard of the same size: its CRC is not the metadata's.
  writeFile(shard, good);
  const std::string other = writeSharded(parent.path(), 6, Sample{torch::ones({2, 3}), torch::zeros({5}, torch::kLong),
                                                                   torch::ones({2, 3}, torch::kDouble)});
  writeFile(shard, readFile(other + "/" + shardFileName(0, 2)));
  EXPECT_NE(errorOf([&] { CheckpointReader(dir).readTensor("a"); }).find("(a shard of another write?)"),
            std::string::npos);

  // Metadata that does not describe the shards: a gap, a range past the end.
  writeFile(shard, good);
  ShardedMetadata md = readShardedMetadata(dir);
  md.shards[1].ranges[0].count = 1;
  writeShardedMetadata(dir, md);
  EXPECT_EQ(errorOf([&] { CheckpointReader reader(dir); }),
            dir + "/metadata.dtck: elements [5, 6) of 'a' are in no shard");
  md.shards[1].ranges[0].count = 3;
  writeShardedMetadata(dir, md);
  EXPECT_EQ(errorOf([&] { CheckpointReader reader(dir); }),
            dir + "/metadata.dtck: rank-00001-of-00002.dtck holds elements [4, 7) of 'a', which has 6");
  md.shards.pop_back();
  writeShardedMetadata(dir, md);
  EXPECT_EQ(errorOf([&] { CheckpointReader reader(dir); }), dir + "/metadata.dtck: 1 shard(s) for a world size of 2");

  // A truncated metadata file.
  const std::string metadata = readFile(dir + "/metadata.dtck");
  writeFile(dir + "/metadata.dtck", metadata.substr(0, metadata.size() / 2));
  EXPECT_NE(errorOf([&] { CheckpointReader reader(dir); }).find(dir + "/metadata.dtck is truncated"),
            std::string::npos);
  EXPECT_TRUE(missingCheckpointParts(dir).empty()) << "a present metadata file that does not read is damage";
}

// A metadata file that fails its checksum: the newest checkpoint is damaged,
// not unfinished. Resuming skips it with a warning naming the file (so an
// older one is used), and writing the next checkpoint does not delete it
// as a dead write.
TEST(ShardedCheckpointTest, DamagedMetadataIsCorruptionNeverAnUnfinishedWrite) {
  TempDir parent;
  writeSharded(parent.path(), 2);
  const std::string dir = writeSharded(parent.path(), 5);
  std::string metadata = readFile(dir + "/metadata.dtck");
  metadata[metadata.size() - 10] ^= 0x20;  // in the stored CRC (the trailer: length, CRC, end magic)
  writeFile(dir + "/metadata.dtck", metadata);
  EXPECT_TRUE(missingCheckpointParts(dir).empty());
  EXPECT_EQ(newestCompleteCheckpoint(parent.path()), dir);
  EXPECT_NE(errorOf([&] { loadCheckpoint(dir); }).find(dir + "/metadata.dtck: checksum mismatch"), std::string::npos);

  setLogLevel(LogLevel::kInfo);
  ::testing::internal::CaptureStderr();
  const auto latest = Checkpointer({.dir = parent.path()}).loadLatestValid();
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->first, parent / "ckpt-000000002");
  EXPECT_NE(log.find("skipping an invalid checkpoint: " + dir + "/metadata.dtck: checksum mismatch"), std::string::npos)
      << log;

  // Written next with --keep 1: the damaged one is newer than the only
  // valid one kept, so it stays for someone to look at.
  Checkpointer ckpt({.dir = parent.path(), .keep = 1});
  ckpt.save(3, {{{"x", torch::zeros({2})}}, {}});
  EXPECT_EQ(ckpt.list(), (std::vector<std::string>{dir, parent / "ckpt-000000003.dtck"}));
}

TEST(ShardedCheckpointTest, PruningKeepsWholeCheckpointsAndDropsDeadWrites) {
  TempDir parent;
  for (int64_t step : {1, 2, 4}) writeSharded(parent.path(), step);
  const std::string dead = writeSharded(parent.path(), 3);
  ::unlink((dead + "/metadata.dtck").c_str());  // a write that died at step 3
  const std::string later = writeSharded(parent.path(), 9);
  ::unlink((later + "/metadata.dtck").c_str());  // newer than what is saved next: left alone
  Checkpointer ckpt({.dir = parent.path(), .keep = 2});
  const std::string saved = ckpt.save(5, {{{"x", torch::zeros({2})}}, {}});
  EXPECT_EQ(ckpt.list(), (std::vector<std::string>{later, saved, parent / "ckpt-000000004"}));
}

}  // namespace
}  // namespace dtrain
