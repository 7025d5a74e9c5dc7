// `dtrain train` end to end, as real processes: convergence on
// Fashion-MNIST, a SIGKILLed rank recovered from a checkpoint with
// bitwise-equal results, resume skipping a corrupt checkpoint, bad input,
// and the library example.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tests/data/idx_files.h"
#include "tests/support/bad_input.h"
#include "tests/support/command.h"
#include "tests/support/ports.h"
#if DTRAIN_TRAIN_HTTP
#include <httplib.h>
#endif
#include "tests/support/checkpoint_view.h"

namespace dtrain {
namespace {
using testing::readCheckpoint;

namespace fs = std::filesystem;
using testing::BadCommandLine;
using testing::dtrainBin;
using testing::freePort;
using testing::runCommand;

const std::string kFashion = "/usr/share/datasets/fashion-mnist";

std::string freshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "train_cli_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string launchCli(int ranks, const std::string& extra = "") {
  return dtrainBin() + " launch --nproc-per-node " + std::to_string(ranks) + " --master-port " +
         std::to_string(freePort()) + " --monitor-interval 0.1 " + extra + " " + dtrainBin() + " train ";
}

nlohmann::json lastCliRecord(const std::string& jsonl, const std::string& event) {
  std::ifstream in(jsonl);
  std::string line;
  nlohmann::json found;
  while (std::getline(in, line)) {
    auto record = nlohmann::json::parse(line);
    if (record["event"] == event) found = record;
  }
  return found;
}

// The main job: the defaults (CNN, 3 epochs), two ranks.
TEST(TrainCliTest, TwoRanksReachEightyNinePercentOnFashionMnist) {
  const std::string dir = freshDir("converge");
  auto r = runCommand(launchCli(2) + "--metrics-jsonl " + dir + "/m.jsonl --progress lines", 600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto summary = lastCliRecord(dir + "/m.jsonl", "summary");
  ASSERT_FALSE(summary.is_null()) << r.output;
  EXPECT_EQ(summary["total"], 10000);
  EXPECT_EQ(summary["world_size"], 2);
  EXPECT_GE(summary["accuracy"].get<double>(), 0.89) << r.output;
  EXPECT_NE(r.output.find("dtrain train: test accuracy"), std::string::npos) << r.output;
}

// The same short job, killed or not, must end with the same bits.
TEST(TrainCliTest, KilledRankResumesFromCheckpointToBitwiseEqualParameters) {
  const std::string common = "--model mlp --epochs 1 --max-steps 90 --checkpoint-every 20 --log-every 10 "
                             "--progress lines --seed 5 --resume auto ";
  const std::string clean = freshDir("clean");
  auto a = runCommand(launchCli(2) + common + "--checkpoint-dir " + clean, 300);
  ASSERT_EQ(a.exit_code, 0) << a.output;

  const std::string killed = freshDir("killed");
  auto b = runCommand("DTRAIN_FAULT_KILL_AT=1:50 " + launchCli(2, "--max-restarts 1") + common + "--checkpoint-dir " +
                          killed,
                      300);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("kills itself after step 50"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("resuming from"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("000000040"), std::string::npos) << "should resume from step 40\n" << b.output;

  auto final_clean = readCheckpoint(clean + "/ckpt-000000090");
  auto final_killed = readCheckpoint(killed + "/ckpt-000000090");
  ASSERT_FALSE(final_clean.tensors.empty());
  for (const auto& [key, tensor] : final_clean.tensors) {
    if (key.rfind("model.", 0) != 0 && key.rfind("optimizer.", 0) != 0) continue;
    ASSERT_TRUE(final_killed.tensors.count(key)) << key;
    EXPECT_TRUE(tensor == final_killed.tensors.at(key)) << key << " differs after the restart";
  }
}

TEST(TrainCliTest, ResumeAutoSkipsACorruptNewestCheckpoint) {
  const std::string dir = freshDir("corrupt");
  const std::string common = dtrainBin() + " train --model mlp --epochs 1 --progress none --checkpoint-dir " + dir;
  auto first = runCommand(common + " --max-steps 30 --checkpoint-every 10", 300);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string shard = dir + "/ckpt-000000030/rank-00000-of-00001.dtck";
  {  // Damage the newest one's shard in the middle.
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2000);
    f.put('\x5a');
  }
  auto second = runCommand(common + " --max-steps 40 --resume auto", 300);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find(shard + ": checksum mismatch"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("resuming from"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("ckpt-000000020"), std::string::npos) << second.output;

  auto explicit_bad = runCommand(common + " --resume " + dir + "/ckpt-000000030/metadata.dtck", 120);
  EXPECT_EQ(explicit_bad.exit_code, 2) << explicit_bad.output;
  EXPECT_NE(explicit_bad.output.find(shard), std::string::npos) << explicit_bad.output;
}

// Corrupt checkpoints take none of the --keep places: with the two newest
// corrupt, the run resumes from the oldest, and writing the next one keeps
// that good one (counting the corrupt ones, rotation deleted it). When
// every checkpoint is invalid, --resume auto refuses to start over them
// (exit 2) and --resume auto-or-fresh starts from step 0.
TEST(TrainCliTest, RotationCountsOnlyValidCheckpointsAndAllInvalidIsAnError) {
  const std::string dir = freshDir("rotation");
  const std::string common = dtrainBin() + " train --model mlp --epochs 1 --progress none --checkpoint-every 10 "
                                           "--keep 2 --checkpoint-dir " + dir;
  // --keep 3 while writing 10, 20, 30, so that all three are there.
  auto first = runCommand(common + " --keep 3 --max-steps 30", 300);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto damage = [&dir](int step) {
    char name[64];
    std::snprintf(name, sizeof(name), "/ckpt-%09d/rank-00000-of-00001.dtck", step);
    std::fstream f(dir + name, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2000);
    f.put('\x5a');
  };
  damage(30);
  damage(20);
  auto second = runCommand(common + " --max-steps 20 --resume auto", 300);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resuming from " + dir + "/ckpt-000000010"), std::string::npos) << second.output;
  // 20 written again (the corrupt one replaced): the two valid ones are 20
  // and 10, both kept; the corrupt 30 is newer and stays, taking no place.
  EXPECT_TRUE(fs::exists(dir + "/ckpt-000000010"));
  EXPECT_TRUE(fs::exists(dir + "/ckpt-000000020"));
  EXPECT_TRUE(fs::exists(dir + "/ckpt-000000030"));
  // Going on: 30 written again, then 40; the newest two valid ones stay.
  auto third = runCommand(common + " --max-steps 40 --resume auto", 300);
  ASSERT_EQ(third.exit_code, 0) << third.output;
  EXPECT_TRUE(fs::exists(dir + "/ckpt-000000040"));
  EXPECT_TRUE(fs::exists(dir + "/ckpt-000000030"));
  EXPECT_FALSE(fs::exists(dir + "/ckpt-000000020"));
  EXPECT_FALSE(fs::exists(dir + "/ckpt-000000010"));

  const std::string all_bad = freshDir("all-invalid");
  const std::string bad_common = dtrainBin() + " train --model mlp --epochs 1 --progress none --checkpoint-every 10 "
                                               "--checkpoint-dir " + all_bad;
  ASSERT_EQ(runCommand(bad_common + " --max-steps 10", 300).exit_code, 0);
  {
    std::fstream f(all_bad + "/ckpt-000000010/rank-00000-of-00001.dtck",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2000);
    f.put('\x5a');
  }
  auto refused = runCommand(bad_common + " --max-steps 20 --resume auto", 300);
  EXPECT_TRUE(testing::exitsTwoSaying(refused, "--resume auto: none of the 1 complete checkpoint(s) in '" + all_bad +
                                                   "' is valid"))
      << refused.output;
  EXPECT_NE(refused.output.find("--resume auto-or-fresh"), std::string::npos) << refused.output;
  auto fresh = runCommand(bad_common + " --max-steps 20 --resume auto-or-fresh", 300);
  EXPECT_EQ(fresh.exit_code, 0) << fresh.output;
  EXPECT_NE(fresh.output.find("is valid; starting from step 0"), std::string::npos) << fresh.output;

  // A metadata file that fails its checksum is damage too, never a write
  // that was cut short: the same refusal, naming the file.
  const std::string bad_meta = freshDir("damaged-metadata");
  const std::string meta_common = dtrainBin() + " train --model mlp --epochs 1 --progress none --checkpoint-every 10 "
                                                "--checkpoint-dir " + bad_meta;
  ASSERT_EQ(runCommand(meta_common + " --max-steps 10", 300).exit_code, 0);
  {
    const std::string metadata = bad_meta + "/ckpt-000000010/metadata.dtck";
    std::fstream f(metadata, std::ios::in | std::ios::out | std::ios::binary);
    char byte = 0;
    f.seekg(-10, std::ios::end);  // in the stored CRC
    f.get(byte);
    f.seekp(-10, std::ios::end);
    f.put(static_cast<char>(byte ^ 0x20));
  }
  auto meta_refused = runCommand(meta_common + " --max-steps 20 --resume auto", 300);
  EXPECT_TRUE(testing::exitsTwoSaying(meta_refused, "--resume auto: none of the 1 complete checkpoint(s) in '" +
                                                        bad_meta + "' is valid"))
      << meta_refused.output;
  EXPECT_NE(meta_refused.output.find("ckpt-000000010/metadata.dtck: checksum mismatch"), std::string::npos)
      << meta_refused.output;
}

class TrainBadInputTest : public ::testing::TestWithParam<BadCommandLine> {};

TEST_P(TrainBadInputTest, ExitsTwoWithAClearMessage) {
  const BadCommandLine& c = GetParam();
  auto r = runCommand("env -u RANK -u WORLD_SIZE " + dtrainBin() + " train --progress none " + c.args, 120);
  EXPECT_TRUE(testing::exitsTwoSaying(r, c.expected));
}

// A FIFO: open() for reading would wait for a writer forever.
std::string fifoPath() {
  const std::string path = freshDir("fifo") + "/ckpt.dtck";
  if (::mkfifo(path.c_str(), 0600) != 0) return "/nonexistent/mkfifo-failed";
  return path;
}

std::string truncatedFashionDir() {
  const std::string dir = freshDir("truncated");
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    fs::copy_file(kFashion + "/" + f, dir + "/" + f);
  }
  // Test images: a raw IDX header promising 10,000 images, and 100 of them.
  std::ofstream out(dir + "/t10k-images-idx3-ubyte", std::ios::binary);
  const unsigned char header[16] = {0, 0, 8, 3, 0, 0, 0x27, 0x10, 0, 0, 0, 28, 0, 0, 0, 28};
  out.write(reinterpret_cast<const char*>(header), 16);
  out << std::string(100 * 28 * 28, '\0');
  return dir;
}

// Hand-made IDX files, 8 images a split, with one train label of 200: the
// model must not be sized by it.
std::string labelOutOfRangeDir() {
  const std::string dir = freshDir("label-out-of-range");
  testing::Bytes train_labels = testing::idxLabels(8);
  train_labels[8 + 5] = 200;
  testing::writeFile(dir + "/train-images-idx3-ubyte", testing::idxImages(8, 28, 28));
  testing::writeFile(dir + "/train-labels-idx1-ubyte", train_labels);
  testing::writeFile(dir + "/t10k-images-idx3-ubyte", testing::idxImages(8, 28, 28));
  testing::writeFile(dir + "/t10k-labels-idx1-ubyte", testing::idxLabels(8));
  return dir;
}

// Training images of 784x784, test images of 28x28: refused before training
// (it used to fail at the first evaluation, inside a product).
std::string splitShapesDifferDir() {
  const std::string dir = freshDir("split-shapes");
  testing::writeFile(dir + "/train-images-idx3-ubyte", testing::idxImages(2, 784, 784));
  testing::writeFile(dir + "/train-labels-idx1-ubyte", testing::idxLabels(2));
  testing::writeFile(dir + "/t10k-images-idx3-ubyte", testing::idxImages(2, 28, 28));
  testing::writeFile(dir + "/t10k-labels-idx1-ubyte", testing::idxLabels(2));
  return dir;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TrainBadInputTest,
    ::testing::Values(
        BadCommandLine{"unknown_model", "--model resnet9", "--model 'resnet9': unknown; expected one of mlp, cnn"},
        BadCommandLine{"unknown_dataset", "--dataset imagenet",
                       "--dataset 'imagenet': unknown; expected one of fashion-mnist, mnist, cifar10, synthetic, "
                       "text or chat"},
        BadCommandLine{"missing_data_dir", "--data-dir /nonexistent/fmnist",
                 "--data-dir '/nonexistent/fmnist': no such directory; expected an existing directory"},
        BadCommandLine{"batch_size_zero", "--batch-size 0",
                 "--batch-size '0': out of range; expected an integer from 1 to 1048576"},
        BadCommandLine{"batch_size_huge", "--batch-size 2147483647",
                 "--batch-size '2147483647': out of range; expected an integer from 1 to 1048576"},
        BadCommandLine{"epochs_overflow", "--epochs 99999999999999999999999",
                 "--epochs '99999999999999999999999': out of range; expected an integer from 1 to 1000000"},
        BadCommandLine{"seed_negative", "--seed -1", "--seed '-1': out of range; expected an integer >= 0"},
        BadCommandLine{"timeout_zero", "--timeout 0", "--timeout '0': out of range; expected an integer from 1 to 604800"},
        BadCommandLine{"timeout_negative", "--timeout -5", "--timeout '-5': out of range"},
        BadCommandLine{"lr_inf", "--lr inf", "--lr 'inf': not a finite number; expected a finite number >= 0 and <= 100"},
        BadCommandLine{"warmup_nan", "--warmup nan", "--warmup 'nan': not a finite number"},
        BadCommandLine{"momentum_five", "--momentum 5",
                 "--momentum '5': out of range; expected a finite number >= 0 and < 1"},
        BadCommandLine{"step_epochs_zero", "--schedule step --step-epochs 0",
                 "--step-epochs '0': out of range; expected a finite number > 0 and <= 1000000 epochs"},
        BadCommandLine{"clip_negative", "--clip-grad-norm -1", "--clip-grad-norm '-1': out of range"},
        BadCommandLine{"clip_nan", "--clip-grad-norm nan", "--clip-grad-norm 'nan': not a finite number"},
        BadCommandLine{"bucket_huge", "--bucket-mb 1e12",
                 "--bucket-mb '1e12': out of range; expected a finite number > 0 and <= 16384 MiB"},
        BadCommandLine{"bucket_nan", "--bucket-mb nan", "--bucket-mb 'nan': not a finite number"},
        BadCommandLine{"metrics_port_high", "--metrics-port 70000",
                 "--metrics-port '70000': out of range; expected a port from 1 to 65535, or 0 (off)"},
        BadCommandLine{"metrics_port_negative", "--metrics-port -1", "--metrics-port '-1': out of range"},
        BadCommandLine{"unknown_precision", "--precision fp4",
                       "--precision 'fp4': unknown; expected one of fp32, bf16, fp16 or fp8"},
        BadCommandLine{"fp8_for_a_cnn", "--precision fp8",
                       "--precision fp8 with --model cnn: FP8 computes the transformer blocks' linear layers (gpt2, "
                       "llama); use --precision bf16"},
        // This machine has no FP8 GPU (and its libtorch may lack float8): the reason, then the way out.
        BadCommandLine{"fp8_without_an_fp8_gpu",
                       "--model gpt2 --layers 2 --dim 32 --heads 4 --seq-len 32 --vocab-size 320 --dataset text "
                       "--tokenizer byte --precision fp8 --max-steps 1",
                       "--precision fp8: FP8 products need"},
        BadCommandLine{"fp8_recipe_without_fp8",
                       "--model gpt2 --layers 2 --dim 32 --heads 4 --seq-len 32 --vocab-size 320 --dataset text "
                       "--tokenizer byte --precision bf16 --fp8-recipe rowwise --max-steps 1",
                       "--fp8-recipe rowwise scales --precision fp8's products; this run's precision is bf16 (add "
                       "--precision fp8 or drop --fp8-recipe)"},
        BadCommandLine{"fp8_recipe_unknown", "--fp8-recipe columnwise",
                       "--fp8-recipe 'columnwise': unknown; expected one of tensorwise or rowwise"},
        BadCommandLine{"fp8_rowwise_without_an_fp8_gpu",
                       "--model gpt2 --layers 2 --dim 32 --heads 4 --seq-len 32 --vocab-size 320 --dataset text "
                       "--tokenizer byte --precision fp8 --fp8-recipe rowwise --max-steps 1",
                       "--precision fp8: FP8 products need"},
        BadCommandLine{"unknown_progress", "--progress fancy", "--progress 'fancy': unknown"},
        BadCommandLine{"misspelt_flag", "--modle gpt2", "dtrain train: unknown flag --modle; did you mean --model?"},
        BadCommandLine{"unknown_flag", "--frobnicate-everything 3",
                       "dtrain train: unknown flag --frobnicate-everything; `--help` lists the flags"},
        BadCommandLine{"timeline_dir_missing", "--timeline /nonexistent/dir/t.json",
                 "--timeline '/nonexistent/dir/t.json': its directory '/nonexistent/dir' does not exist"},
        BadCommandLine{"data_on_gpu_without_gpu", "--data-on-gpu --model mlp --max-steps 1",
                 "--data-on-gpu needs a CUDA device, but this rank trains on cpu"},
        BadCommandLine{"truncated_data_file", "--data-dir " + truncatedFashionDir(), "t10k-images-idx3-ubyte"},
        BadCommandLine{"label_out_of_range", "--data-dir " + labelOutOfRangeDir(),
                       "train-labels-idx1-ubyte: label 200 at index 5 is out of range; expected 0..9 (the data set "
                       "has 10 classes)"},
        BadCommandLine{"split_shapes_differ", "--model mlp --data-dir " + splitShapesDifferDir(),
                       ": the test images (t10k-images-idx3-ubyte) are 1x28x28 (channels x height x width), the "
                       "training images (train-images-idx3-ubyte) 1x784x784; expected both splits to hold images of "
                       "one shape"},
        BadCommandLine{"corrupt_checkpoint", "--resume /etc/hostname", "/etc/hostname"},
        BadCommandLine{"missing_checkpoint", "--resume /nonexistent/ckpt.dtck",
                 "--resume '/nonexistent/ckpt.dtck': no such file; expected auto, auto-or-fresh, none, an existing "
                 "checkpoint file or a sharded checkpoint's directory"},
        BadCommandLine{"directory_that_is_no_checkpoint", "--resume /tmp",
                       "--resume '/tmp': a directory without metadata.dtck"},
        BadCommandLine{"fifo_checkpoint", "--resume " + fifoPath(),
                       "': a FIFO (named pipe); expected auto, auto-or-fresh, none, an existing checkpoint file"},
        BadCommandLine{"checkpoint_dir_is_a_file", "--checkpoint-dir /etc/hostname/ckpt",
                       "--checkpoint-dir '/etc/hostname/ckpt': '/etc/hostname' is a regular file; expected a "
                       "directory (created if missing)"},
        BadCommandLine{"metrics_jsonl_is_a_directory", "--metrics-jsonl /tmp",
                       "--metrics-jsonl '/tmp': a directory; expected a file path in an existing directory"},
        BadCommandLine{"timeline_is_a_directory", "--timeline /tmp",
                       "--timeline '/tmp': a directory; expected a file path in an existing directory"}),
    testing::badCommandLineName);

// A bad DTRAIN_* variable is refused before any work, naming it.
TEST(TrainCliTest, BadSettingInTheEnvironmentExitsTwo) {
  auto r = runCommand("DTRAIN_LOG_LEVEL=bogus " + dtrainBin() + " train --progress none --max-steps 1", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("DTRAIN_LOG_LEVEL='bogus' is refused; expected one of debug, info, warn, error or off"),
            std::string::npos)
      << r.output;
  auto backend = runCommand("DTRAIN_BACKEND=mpi " + dtrainBin() + " train --progress none --max-steps 1", 60);
  EXPECT_EQ(backend.exit_code, 2) << backend.output;
  EXPECT_NE(backend.output.find("DTRAIN_BACKEND='mpi' is refused"), std::string::npos) << backend.output;
}

// --print-bucket-timeline: one row per gradient bucket of the last backward.
TEST(TrainCliTest, BucketTimelineHasARowPerBucket) {
  auto r = runCommand(launchCli(2) + "--model resnet18 --dataset synthetic --synthetic-samples 64 "
                                  "--synthetic-image-size 8 --batch-size 8 --epochs 1 --max-steps 3 --bucket-mb 10 "
                                  "--progress lines --print-bucket-timeline",
                      300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto at = r.output.find("timeline of the last backward");
  ASSERT_NE(at, std::string::npos) << r.output;
  int rows = 0;
  std::istringstream lines(r.output.substr(at));
  std::string line;
  // Rows end in "yes" or "no"; rank 0's summary line (on its other stream)
  // may come between them.
  while (std::getline(lines, line)) {
    const bool row = line.ends_with(" yes") || line.ends_with(" no");
    rows += row ? 1 : 0;
  }
  // ResNet-18's 44.7 MB of gradients: the 1 MiB first bucket, then 10 MiB ones.
  EXPECT_EQ(rows, 6) << r.output;
}

TEST(TrainCliTest, MoreRanksThanSamplesIsAClearError) {
  auto r = runCommand(launchCli(3) + "--dataset synthetic --synthetic-samples 2 --progress none", 120);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("3 ranks"), std::string::npos) << r.output;
}

// The data kept on the device builds the same batches as the loader (on the
// CPU device here, through --data-on-gpu's testing twin --data-on-device), so
// two ranks end with the same bits either way.
TEST(TrainCliTest, DataOnDeviceTrainsExactlyLikeTheLoader) {
  const std::string common = "--model mlp --epochs 2 --max-steps 120 --log-every 40 --progress lines --seed 3 "
                             "--checkpoint-every 1000 ";
  const std::string loader_dir = freshDir("loader"), device_dir = freshDir("on_device");
  auto a = runCommand(launchCli(2) + common + "--checkpoint-dir " + loader_dir, 300);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = runCommand(launchCli(2) + common + "--data-on-device --checkpoint-dir " + device_dir, 300);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("data on the device"), std::string::npos) << b.output;
  auto from_loader = readCheckpoint(loader_dir + "/ckpt-000000120");
  auto from_device = readCheckpoint(device_dir + "/ckpt-000000120");
  ASSERT_FALSE(from_loader.tensors.empty());
  for (const auto& [key, tensor] : from_loader.tensors) {
    if (key.rfind("model.", 0) != 0) continue;
    ASSERT_TRUE(from_device.tensors.count(key)) << key;
    EXPECT_TRUE(tensor == from_device.tensors.at(key)) << key << " differs with --data-on-gpu";
  }
}

// Without a CUDA device the step cannot be captured: a clear message, and
// training goes on eagerly to the same result.
TEST(TrainCliTest, CudaGraphsWithoutCudaSayWhyAndTrainEagerly) {
  auto r = runCommand(dtrainBin() + " train --model mlp --epochs 1 --max-steps 20 --progress lines --cuda-graphs",
                      300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("CUDA graphs off: eager ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("0 steps replayed, 20 eager"), std::string::npos) << r.output;
  auto bad = runCommand(dtrainBin() + " train --model mlp --graph-warmup 0", 60);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--graph-warmup '0': out of range; expected an integer from 1 to 1000"),
            std::string::npos)
      << bad.output;
}

// --timeline: one Chrome trace for both ranks, with each step's phases in
// order, the buckets' all-reduces inside the step and the data waits.
TEST(TrainCliTest, TimelineIsOneChromeTraceWithEveryRank) {
  const std::string dir = freshDir("timeline");
  const std::string trace_path = dir + "/trace.json";
  auto r = runCommand(launchCli(2) + "--model mlp --epochs 1 --max-steps 30 --progress lines "
                                  "--timeline-steps 6 --timeline " + trace_path,
                      300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("timeline: " + trace_path), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(trace_path + ".rank0"));
  EXPECT_FALSE(fs::exists(trace_path + ".rank1"));
  std::ifstream in(trace_path);
  ASSERT_TRUE(in) << trace_path;
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::map<std::pair<int, int64_t>, std::map<std::string, std::pair<double, double>>> phases;  // (rank, step)
  std::map<int, int> buckets, waits, names;
  for (const auto& e : trace["traceEvents"]) {
    const int pid = e["pid"].get<int>();
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") ++names[pid];
      continue;
    }
    ASSERT_EQ(e["ph"], "X") << e;
    ASSERT_GE(e["dur"].get<double>(), 0) << e;
    const int64_t step = e["args"]["step"].get<int64_t>();
    EXPECT_GE(step, 5) << e;
    EXPECT_LT(step, 11) << e;
    const std::string name = e["name"].get<std::string>();
    const double begin = e["ts"].get<double>(), end = begin + e["dur"].get<double>();
    if (name.rfind("all-reduce bucket", 0) == 0) {
      ++buckets[pid];
      EXPECT_EQ(e["tid"], 1) << e;
    } else if (name == "data wait") {
      ++waits[pid];
    } else {
      phases[{pid, step}][name] = {begin, end};
    }
  }
  EXPECT_EQ(names[0], 1);
  EXPECT_EQ(names[1], 1);
  ASSERT_EQ(phases.size(), 12u) << "6 steps x 2 ranks";
  for (const auto& [key, p] : phases) {
    ASSERT_EQ(p.size(), 3u) << "rank " << key.first << " step " << key.second;
    EXPECT_LE(p.at("forward").second, p.at("backward").first + 1);
    EXPECT_LE(p.at("backward").second, p.at("optimizer").first + 1);
  }
  for (int rank : {0, 1}) {
    EXPECT_GE(buckets[rank], 6) << "a bucket all-reduce per step on rank " << rank;
    EXPECT_EQ(waits[rank], 6) << rank;
  }
  auto bad = runCommand(dtrainBin() + " train --model mlp --timeline " + trace_path + " --timeline-steps 0", 60);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--timeline-steps '0': out of range; expected an integer from 1 to 100000"),
            std::string::npos)
      << bad.output;
}

#if DTRAIN_TRAIN_HTTP
// --metrics-port: each rank serves its metrics at PORT + LOCAL_RANK while it
// trains, and rank 0 keeps the job's status file until the end.
TEST(TrainCliTest, MetricsPortServesEachRankWhileTraining) {
  const std::string jobs = freshDir("jobs");
  const std::string status_file = jobs + "/" + std::to_string(::geteuid()) + "/metrics-test.json";
  const int port = freePort();
  std::thread training([&] {
    auto r = runCommand("DTRAIN_JOB_ID=metrics-test DTRAIN_JOBS_DIR=" + jobs + " " + launchCli(2) +
                            "--model mlp --epochs 1 --log-every 5 --progress none --metrics-port " +
                            std::to_string(port),
                        300);
    EXPECT_EQ(r.exit_code, 0) << r.output;
  });
  std::map<int, std::string> seen;  // rank -> a /metrics body with steps
  bool status_seen = false;
  for (int attempt = 0; attempt < 600 && (seen.size() < 2 || !status_seen); ++attempt) {
    for (int rank : {0, 1}) {
      if (seen.count(rank)) continue;
      httplib::Client client("127.0.0.1", port + rank);
      client.set_connection_timeout(0, 200000);
      auto res = client.Get("/metrics");
      if (!res || res->status != 200) continue;
      // After the first log interval: a rate above zero.
      const std::string key = "dtrain_train_samples_per_second{dtrain_job=\"metrics-test\",rank=\"" + std::to_string(rank) + "\"} ";
      const auto at = res->body.find(key);
      if (at != std::string::npos && std::atof(res->body.c_str() + at + key.size()) > 0) seen[rank] = res->body;
    }
    if (!status_seen && fs::exists(status_file)) {
      std::ifstream in(status_file);
      const auto status = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      status_seen = !status.is_discarded() && status["world_size"] == 2 && status["samples_per_s"].get<double>() > 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  training.join();
  ASSERT_EQ(seen.size(), 2u) << "both ranks' /metrics while training";
  for (const auto& [rank, body] : seen) {
    for (const char* name : {"dtrain_train_samples_per_second", "dtrain_train_step_seconds_bucket",
                             "dtrain_train_allreduce_bytes_total", "dtrain_train_overlap_ratio",
                             "dtrain_train_data_wait_seconds_total", "dtrain_train_restarts_total"}) {
      EXPECT_NE(body.find(name), std::string::npos) << "rank " << rank << " lacks " << name << "\n" << body;
    }
  }
  EXPECT_TRUE(status_seen) << "no job status file in " << jobs;
  EXPECT_FALSE(fs::exists(status_file)) << "the status file outlived the job";
}
#endif

// `dtrain bench train` starts one group per count and prints a row each.
TEST(BenchTrainCliTest, RunsEachGpuCountAndReportsScaling) {
  auto r = runCommand(dtrainBin() + " bench train --gpus 1,2 --model cnn --image-size 28 --batch-size 16 "
                                    "--steps 4 --warmup 4 --no-cuda-graphs --json",
                      300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto begin = r.output.find("{\"bench\"");
  ASSERT_NE(begin, std::string::npos) << r.output;
  auto json = nlohmann::json::parse(r.output.substr(begin, r.output.find('\n', begin) - begin));
  ASSERT_EQ(json["results"].size(), 2u) << r.output;
  EXPECT_EQ(json["results"][0]["gpus"], 1);
  EXPECT_EQ(json["results"][1]["gpus"], 2);
  EXPECT_DOUBLE_EQ(json["results"][0]["scaling_efficiency"].get<double>(), 1.0);
  for (const auto& row : json["results"]) {
    EXPECT_GT(row["samples_per_s"].get<double>(), 0) << row;
    EXPECT_GT(row["step_ms"].get<double>(), 0) << row;
    EXPECT_TRUE(std::isfinite(row["loss"].get<double>())) << row;
  }
  auto table = runCommand(dtrainBin() + " bench train --gpus 1 --model mlp --image-size 8 --batch-size 8 "
                                        "--steps 2 --warmup 4 --profile-range",  // no effect on the CPU
                          300);
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("# dtrain bench train: mlp, 3x8x8, batch 8/GPU, fp32"), std::string::npos)
      << table.output;
  EXPECT_NE(table.output.find("samples/s"), std::string::npos) << table.output;
}

TEST(BenchTrainCliTest, BadInputIsAClearError) {
  auto gpus = runCommand(dtrainBin() + " bench train --gpus 1,x", 60);
  EXPECT_EQ(gpus.exit_code, 2) << gpus.output;
  EXPECT_NE(gpus.output.find("'x' is not a GPU count"), std::string::npos) << gpus.output;
  // A warm-up too short to capture the CUDA graph after --graph-warmup is refused where a CUDA graph is
  // captured, and no reason to refuse a CPU run, which never captures one.
  auto warmup = runCommand(dtrainBin() + " bench train --model llama --layers 2 --dim 32 --heads 4 --kv-heads 2 "
                           "--seq-len 32 --vocab-size 320 --batch-size 4 --steps 1 --warmup 2 --graph-warmup 3", 120);
  if (fs::exists("/dev/nvidia0")) {
    EXPECT_EQ(warmup.exit_code, 2) << warmup.output;
    EXPECT_NE(warmup.output.find("expected --warmup > --graph-warmup"), std::string::npos) << warmup.output;
  } else {
    EXPECT_EQ(warmup.exit_code, 0) << warmup.output;
  }
  // A pipeline runs eagerly: its warm-up needs no room for a capture.
  auto pipeline = runCommand(dtrainBin() + " bench train --gpus 2 --model llama --layers 2 --dim 32 --heads 4 "
                             "--kv-heads 2 --seq-len 32 --vocab-size 320 --batch-size 4 --pp 2 --microbatches 2 "
                             "--steps 1 --warmup 1 --graph-warmup 3", 120);
  EXPECT_EQ(pipeline.exit_code, 0) << pipeline.output;
  auto model = runCommand(dtrainBin() + " bench train --model vgg --steps 1 --warmup 0 --no-cuda-graphs", 60);
  EXPECT_NE(model.exit_code, 0) << model.output;
  EXPECT_NE(model.output.find("vgg"), std::string::npos) << model.output;
}

TEST(TrainCliTest, LibraryExampleTrainsUnderTheLauncher) {
  const std::string example = std::string(DTRAIN_EXAMPLES_DIR) + "/custom_loop";
  auto r = runCommand(dtrainBin() + " launch --nproc-per-node 2 --master-port " + std::to_string(freePort()) + " " +
                          example + " 150",
                      300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  double first = 0, last = 0;
  const auto at = r.output.find("steps 150, loss ");
  ASSERT_NE(at, std::string::npos) << r.output;
  ASSERT_EQ(std::sscanf(r.output.c_str() + at, "steps 150, loss %lf -> %lf", &first, &last), 2) << r.output;
  EXPECT_LT(last, first * 0.5) << r.output;
}

}  // namespace
}  // namespace dtrain
