// Checkpoint files and the Checkpointer: round trip, the documented format,
// pruning, listing, rejection of damaged files, skipping them, --resume.
#include "dtrain/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <torch/cuda.h>
#include <unistd.h>

#include "checkpoint_test_util.h"
#include "common/host.h"
#include "tests/support/forked_child.h"
#include "common/error.h"
#include "common/log.h"
#include "tests/support/text.h"

namespace dtrain {
namespace {

using testing::TempDir;
using testing::readFile;
using testing::stepName;
using testing::writeFile;

CheckpointState sampleState(int64_t step) {
  CheckpointState state;
  state.tensors["w"] = torch::arange(12, torch::kFloat).reshape({3, 4}) * 0.5;
  state.tensors["step"] = torch::full({1}, step, torch::kLong);
  state.meta = {{"step", step}};
  return state;
}

// Where the tensor data starts: after the preamble and the JSON header.
size_t headerEnd(const std::string& bytes) {
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data() + 12, sizeof(header_bytes));
  return 20 + header_bytes;
}

using testing::configErrorOf;

TEST(CheckpointTest, RoundTripKeepsDtypesShapesValuesAndMeta) {
  TempDir dir;
  Checkpointer ckpt({.dir = dir / "nested/run", .keep = 3});
  CheckpointState state;
  state.tensors["f32"] = torch::arange(12, torch::kFloat).reshape({3, 4}) / 7.0;
  state.tensors["f64"] = torch::arange(5, torch::kDouble) * 1e-300;
  state.tensors["f16"] = torch::arange(6, torch::kFloat).to(torch::kHalf) / 3.0;
  state.tensors["bf16"] = (torch::arange(8, torch::kFloat) - 3.3).to(torch::kBFloat16);
  state.tensors["i64"] = torch::tensor({int64_t{1} << 62, int64_t{-5}});
  state.tensors["i32"] = torch::tensor({-7, 2147483647}, torch::kInt);
  state.tensors["i16"] = torch::tensor({-300, 300}, torch::kShort);
  state.tensors["i8"] = torch::tensor({-128, 127}, torch::kChar);
  state.tensors["u8"] = torch::tensor({0, 255}, torch::kByte);
  state.tensors["bool"] = torch::tensor({true, false, true});
  state.tensors["empty"] = torch::zeros({0, 5});
  state.tensors["scalar"] = torch::tensor(3.5);
  state.tensors["transposed"] = torch::arange(24, torch::kFloat).reshape({4, 6}).t();
  state.tensors["strided"] = torch::arange(20, torch::kLong).slice(0, 1, 20, 3);
  state.tensors["grad"] = torch::ones({2, 2}, torch::requires_grad());
  ASSERT_FALSE(state.tensors["transposed"].is_contiguous());
  state.meta = {{"step", 120}, {"config", {{"lr", 0.1}, {"name", "mlp"}}}, {"sampler", {1, 2, 3}}};

  const std::string path = ckpt.save(120, state);
  EXPECT_EQ(path, dir / "nested/run/ckpt-000000120.dtck");
  const CheckpointState loaded = loadCheckpoint(path);
  EXPECT_EQ(loaded.meta, state.meta);
  ASSERT_EQ(loaded.tensors.size(), state.tensors.size());
  for (const auto& [key, original] : state.tensors) {
    SCOPED_TRACE(key);
    const torch::Tensor& got = loaded.tensors.at(key);
    EXPECT_EQ(got.scalar_type(), original.scalar_type());
    EXPECT_EQ(got.sizes(), original.sizes());
    EXPECT_TRUE(got.is_contiguous());
    EXPECT_TRUE(got.device().is_cpu());
    EXPECT_FALSE(got.requires_grad());
    EXPECT_TRUE(torch::equal(got, original.detach()));
  }
  EXPECT_EQ(loaded.tensors.at("scalar").dim(), 0);
}

TEST(CheckpointTest, SavesCudaTensorsAndLoadsThemOnTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  TempDir dir;
  CheckpointState state;
  state.tensors["bf16"] = (torch::arange(10, torch::kFloat) / 3).to(torch::kCUDA).to(torch::kBFloat16);
  state.tensors["transposed"] = torch::arange(12, torch::kLong).to(torch::kCUDA).reshape({3, 4}).t();
  const CheckpointState loaded = loadCheckpoint(Checkpointer({.dir = dir.path()}).save(1, state));
  for (const auto& [key, original] : state.tensors) {
    SCOPED_TRACE(key);
    EXPECT_TRUE(loaded.tensors.at(key).device().is_cpu());
    EXPECT_TRUE(torch::equal(loaded.tensors.at(key), original.cpu()));
  }
}

// A file written here by the documented layout loads, and save() writes it.
TEST(CheckpointTest, FilesFollowTheDocumentedFormat) {
  TempDir dir;
  auto craft = [](const std::string& header, const std::string& data, uint32_t version = 1) {
    std::string out = "DTRAINCK";
    testing::appendLittleEndian<uint32_t>(out, version);
    testing::appendLittleEndian<uint64_t>(out, header.size());
    out += header + data;
    const uint64_t payload = out.size();
    const uint32_t crc = testing::referenceCrc32(out);
    testing::appendLittleEndian(out, payload);
    testing::appendLittleEndian(out, crc);
    return out + std::string("DTCKEND\0", 8);
  };
  const std::string data("\x07\x00\x00\x00\xff\xff\xff\xff", 8);  // int32 {7, -1}
  auto header = [](const std::string& tensors) { return R"({"meta":{"k":1},"tensors":[)" + tensors + "]}"; };
  const std::string x = R"({"name":"x","dtype":"int32","shape":[2],"offset":0,"bytes":8})";

  writeFile(dir / "good.dtck", craft(header(x), data));
  const CheckpointState good = loadCheckpoint(dir / "good.dtck");
  EXPECT_EQ(good.meta, nlohmann::json({{"k", 1}}));
  EXPECT_TRUE(torch::equal(good.tensors.at("x"), torch::tensor({7, -1}, torch::kInt)));

  // Well-formed files (the CRC holds) that are still wrong.
  struct Bad {
    std::string bytes, expect;
  } bad[] = {
      {craft(header(x), data, 2), "format version 2"},
      {craft(header(R"({"name":"x","dtype":"complex64","shape":[1],"offset":0,"bytes":8})"), data), "unknown dtype"},
      {craft(header(R"({"name":"x","dtype":"int32","shape":[3],"offset":0,"bytes":8})"), data), "has shape [3]"},
      {craft(header(R"({"name":"x","dtype":"int32","shape":[-2],"offset":0,"bytes":8})"), data), "invalid shape"},
      {craft(header(x + "," + x), data + data), "appears twice"},
      {craft(header(x), data + "z"), "header lists 8 bytes"},
      {craft("{not json", data), "malformed header"},
  };
  for (const Bad& b : bad) {
    writeFile(dir / "bad.dtck", b.bytes);
    const std::string message = configErrorOf([&] { loadCheckpoint(dir / "bad.dtck"); });
    EXPECT_NE(message.find(dir / "bad.dtck"), std::string::npos) << message;
    EXPECT_NE(message.find(b.expect), std::string::npos) << message;
  }

  // What save() writes: magic, version 1, and a trailer holding the payload length and its CRC.
  Checkpointer ckpt({.dir = dir.path()});
  const std::string bytes = readFile(ckpt.save(7, sampleState(7)));
  ASSERT_GT(bytes.size(), 40u);
  EXPECT_EQ(bytes.substr(0, 12), std::string("DTRAINCK\x01\0\0\0", 12));
  const std::string payload = bytes.substr(0, bytes.size() - 20);
  uint64_t length = 0;
  uint32_t crc = 0;
  std::memcpy(&length, bytes.data() + payload.size(), 8);
  std::memcpy(&crc, bytes.data() + payload.size() + 8, 4);
  EXPECT_EQ(length, payload.size());
  EXPECT_EQ(crc, testing::referenceCrc32(payload));
  EXPECT_EQ(bytes.substr(bytes.size() - 8), std::string("DTCKEND\0", 8));
}

TEST(CheckpointTest, RejectsWhatItCannotStoreBeforeWritingAnything) {
  TempDir dir;
  Checkpointer ckpt({.dir = dir.path()});
  CheckpointState complex;
  complex.tensors["c"] = torch::zeros({2}, torch::kComplexFloat);
  EXPECT_NE(configErrorOf([&] { ckpt.save(1, complex); }).find("'c' has dtype"), std::string::npos);
  CheckpointState undefined;
  undefined.tensors["u"] = torch::Tensor();
  EXPECT_NE(configErrorOf([&] { ckpt.save(1, undefined); }).find("'u' is undefined"), std::string::npos);
  EXPECT_THROW(ckpt.save(-1, sampleState(1)), ConfigError);
  EXPECT_TRUE(testing::namesIn(dir.path()).empty());
}

TEST(CheckpointTest, ListsNewestFirstByStepAndPrunesToKeep) {
  TempDir dir;
  Checkpointer ckpt({.dir = dir.path(), .keep = 3});
  for (int64_t step : {1, 2, 3, 4, 5, 6}) ckpt.save(step, sampleState(step));
  EXPECT_EQ(ckpt.list(), (std::vector<std::string>{dir / stepName(6), dir / stepName(5), dir / stepName(4)}));

  // Numeric, not lexical, order; names save() would not write are ignored.
  ckpt.save(1234567890, sampleState(1234567890));
  for (const char* other : {"ckpt-12.dtck", "other-000000009.dtck", "ckpt-000000009.dtck.bak", "ckpt-00000000x.dtck"}) {
    writeFile(dir / other, "x");
  }
  ASSERT_EQ(::mkdir((dir / stepName(999999999)).c_str(), 0755), 0);
  EXPECT_EQ(ckpt.list(), (std::vector<std::string>{dir / "ckpt-1234567890.dtck", dir / stepName(6), dir / stepName(5)}));

  // A save older than the kept ones is itself kept (it is what the run just wrote).
  ckpt.save(3, sampleState(3));
  EXPECT_EQ(ckpt.list(), (std::vector<std::string>{dir / "ckpt-1234567890.dtck", dir / stepName(6), dir / stepName(5),
                                                   dir / stepName(3)}));
}

TEST(CheckpointTest, BadOptionsAndUnwritableDirectories) {
  TempDir dir;
  EXPECT_THROW(Checkpointer({.dir = dir.path(), .keep = 0}), ConfigError);
  EXPECT_THROW(Checkpointer({.dir = dir.path(), .keep = -2}), ConfigError);
  EXPECT_THROW(Checkpointer({.dir = ""}), ConfigError);
  EXPECT_THROW(Checkpointer({.dir = dir.path(), .keep = 1, .prefix = "a/b"}), ConfigError);

  // A regular file where a directory should be: no user (root included) can create it.
  writeFile(dir / "file", "x");
  try {
    Checkpointer({.dir = dir / "file/ckpt"});
    FAIL() << "expected an IoError";
  } catch (const IoError& e) {
    EXPECT_NE(e.message().find(dir / "file/ckpt"), std::string::npos) << e.message();
  }
  Checkpointer ckpt({.dir = dir / "gone"});
  ASSERT_EQ(::rmdir((dir / "gone").c_str()), 0);
  try {
    ckpt.save(5, sampleState(5));
    FAIL() << "expected an IoError";
  } catch (const IoError& e) {
    EXPECT_NE(e.message().find(dir / "gone/ckpt-000000005.dtck"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("No such file"), std::string::npos) << e.message();
  }
}

TEST(CheckpointTest, TruncatedFilesNameTheFileAndBothSizes) {
  TempDir dir;
  const std::string bytes = readFile(Checkpointer({.dir = dir.path()}).save(120, sampleState(120)));
  const size_t header_end = headerEnd(bytes);
  const std::string path = dir / "ckpt-000000121.dtck";
  for (size_t cut : {size_t{0}, size_t{5}, size_t{19}, size_t{20}, size_t{30}, header_end, header_end + 7,
                     bytes.size() - 20, bytes.size() - 1}) {
    SCOPED_TRACE(cut);
    writeFile(path, bytes.substr(0, cut));
    const std::string message = configErrorOf([&] { loadCheckpoint(path); });
    EXPECT_NE(message.find(path + " is truncated: " + std::to_string(cut) + " bytes"), std::string::npos) << message;
    if (cut >= header_end) {
      EXPECT_NE(message.find("expected " + std::to_string(bytes.size())), std::string::npos) << message;
    }
  }
  writeFile(path, bytes + "extra");
  EXPECT_NE(configErrorOf([&] { loadCheckpoint(path); }).find("expected " + std::to_string(bytes.size())),
            std::string::npos);
}

TEST(CheckpointTest, FlippedBytesAreCaught) {
  TempDir dir;
  const std::string bytes = readFile(Checkpointer({.dir = dir.path()}).save(120, sampleState(120)));
  const std::string path = dir / "flipped.dtck";
  const size_t header_end = headerEnd(bytes);
  struct Flip {
    size_t at;
    std::string expect;
  } flips[] = {{0, "bad magic"},
               {8, "format version"},
               {25, "checksum mismatch (file is corrupt)"},              // in the JSON header
               {header_end + 3, "checksum mismatch (file is corrupt)"},  // in the tensor data
               {bytes.size() - 21, "checksum mismatch (file is corrupt)"},
               {bytes.size() - 10, "checksum mismatch (file is corrupt)"},  // the stored CRC
               {bytes.size() - 20, "damaged trailer"},                      // the payload length
               {bytes.size() - 14, "damaged trailer"},
               {bytes.size() - 3, "damaged trailer"}};                      // the end magic
  for (const Flip& flip : flips) {
    SCOPED_TRACE(flip.at);
    std::string damaged = bytes;
    damaged[flip.at] ^= 0x10;
    writeFile(path, damaged);
    const std::string message = configErrorOf([&] { loadCheckpoint(path); });
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(flip.expect), std::string::npos) << message;
  }
  writeFile(path, "just some text, long enough to have a header and a trailer");
  EXPECT_NE(configErrorOf([&] { loadCheckpoint(path); }).find("not a dtrain checkpoint (bad magic)"),
            std::string::npos);
  EXPECT_THROW(loadCheckpoint(dir / "missing.dtck"), IoError);
}

TEST(CheckpointTest, LoadLatestValidSkipsCorruptNewerOnesWithAWarning) {
  TempDir dir;
  Checkpointer ckpt({.dir = dir.path(), .keep = 5});
  for (int64_t step : {10, 20, 30, 40}) ckpt.save(step, sampleState(step));
  std::string bytes = readFile(dir / stepName(40));
  writeFile(dir / stepName(40), bytes.substr(0, bytes.size() / 2));
  bytes = readFile(dir / stepName(30));
  bytes[bytes.size() - 30] ^= 1;
  writeFile(dir / stepName(30), bytes);

  setLogLevel(LogLevel::kInfo);
  ::testing::internal::CaptureStderr();
  const auto latest = ckpt.loadLatestValid();
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->first, dir / stepName(20));
  EXPECT_EQ(latest->second.meta.at("step"), 20);
  EXPECT_TRUE(torch::equal(latest->second.tensors.at("step"), torch::full({1}, 20, torch::kLong)));
  EXPECT_NE(log.find(stepName(40) + " is truncated"), std::string::npos) << log;
  EXPECT_NE(log.find(stepName(30) + ": checksum mismatch"), std::string::npos) << log;
  EXPECT_EQ(log.find(stepName(20)), std::string::npos) << log;

  for (int64_t step : {10, 20}) writeFile(dir / stepName(step), "garbage");
  EXPECT_FALSE(ckpt.loadLatestValid().has_value());
}

TEST(CheckpointTest, LeftoverTemporariesAreIgnoredAndThoseOfDeadProcessesRemoved) {
  TempDir dir;
  Checkpointer ckpt({.dir = dir.path()});
  ckpt.save(40, sampleState(40));
  testing::ForkedChild gone([](const testing::ChildSide&) { return 0; });
  gone.reap();
  const pid_t dead = gone.pid();
  const std::string host = hostName();
  const std::string dead_temp = dir / ("." + stepName(50) + ".tmp-" + host + "-" + std::to_string(dead));
  const std::string live_temp = dir / ("." + stepName(60) + ".tmp-" + host + "-" + std::to_string(::getppid()));
  writeFile(dead_temp, "DTRAINCK partial");
  writeFile(live_temp, "DTRAINCK partial");

  EXPECT_EQ(ckpt.list(), std::vector<std::string>{dir / stepName(40)});
  EXPECT_EQ(ckpt.loadLatestValid()->first, dir / stepName(40));
  ckpt.save(41, sampleState(41));
  EXPECT_FALSE(testing::exists(dead_temp));
  EXPECT_TRUE(testing::exists(live_temp));  // its writer may still rename it
}

TEST(CheckpointTest, ResolveResume) {
  TempDir dir;
  EXPECT_FALSE(resolveResume("", dir.path()).has_value());
  EXPECT_FALSE(resolveResume("none", dir.path()).has_value());
  EXPECT_FALSE(resolveResume("auto", dir.path()).has_value());
  EXPECT_FALSE(resolveResume("auto", dir / "missing").has_value());
  EXPECT_THROW(resolveResume("auto", ""), ConfigError);

  Checkpointer ckpt({.dir = dir.path()});
  ckpt.save(10, sampleState(10));
  ckpt.save(20, sampleState(20));
  EXPECT_EQ(resolveResume("auto", dir.path())->first, dir / stepName(20));
  const auto named = resolveResume(dir / stepName(10), "");
  ASSERT_TRUE(named.has_value());
  EXPECT_EQ(named->first, dir / stepName(10));
  EXPECT_EQ(named->second.meta.at("step"), 10);

  try {
    resolveResume(dir / "nope.dtck", dir.path());
    FAIL() << "expected an IoError";
  } catch (const IoError& e) {
    EXPECT_NE(e.message().find(dir / "nope.dtck"), std::string::npos) << e.message();
  }
  writeFile(dir / stepName(20), "garbage");
  EXPECT_THROW(resolveResume(dir / stepName(20), ""), ConfigError);  // named explicitly: no fallback
  EXPECT_THROW(resolveResume(dir.path(), ""), ConfigError);          // a directory
}

}  // namespace
}  // namespace dtrain
