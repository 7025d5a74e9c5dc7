// `dtrain train --shard optimizer` (ZeRO-1) end to end as real processes on
// Gloo: it ends with the same bits as replicated training (AdamW with
// clipping and accumulation, SGD with momentum), its checkpoints hold the
// unsharded optimizer layout (a replicated run resumes one and continues
// bit for bit), and they load on another world size.
#include <gtest/gtest.h>

#include <string>

#include "dtrain/checkpoint.h"
#include "tests/support/command.h"
#include "tests/support/ports.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace dtrain {
namespace {

using testing::dtrainBin;
using testing::freePort;
using testing::runCommand;
using testing::TempDir;

const std::string kTinyGpt = "--model gpt2 --layers 2 --dim 32 --heads 4 --seq-len 32 --vocab-size 320 "
                             "--dataset text --tokenizer byte --batch-size 4 --seed 5 --progress none ";
const std::string kAdamW = "--optimizer adamw --lr 3e-3 --beta2 0.95 --weight-decay 0.1 --warmup-steps 2 "
                           "--schedule cosine --clip-grad-norm 0.5 ";
// The same without a schedule that depends on the run's length (runs of
// different --max-steps follow the same learning rates).
const std::string kAdamWConstant = "--optimizer adamw --lr 3e-3 --beta2 0.95 --weight-decay 0.1 --warmup-steps 2 "
                                   "--schedule constant --clip-grad-norm 0.5 ";

const std::string& corpusCache() {
  static const std::string dir = testing::makeTempDir("dtrain-shard-corpus");
  return dir;
}

std::string launch(int ranks, const std::string& args) {
  return dtrainBin() + " launch --nproc-per-node " + std::to_string(ranks) + " --master-port " +
         std::to_string(freePort()) + " --monitor-interval 0.1 " + dtrainBin() + " train --cache-dir " +
         corpusCache() + " " + kTinyGpt + args + " 2>&1";
}

// Every model and optimizer tensor of the two checkpoints, bit for bit.
void expectSameState(const std::string& a_path, const std::string& b_path) {
  const CheckpointState a = loadCheckpoint(a_path), b = loadCheckpoint(b_path);
  int compared = 0;
  for (const auto& [key, tensor] : a.tensors) {
    if (key.rfind("model.", 0) != 0 && key.rfind("optimizer.", 0) != 0) continue;
    ASSERT_TRUE(b.tensors.count(key)) << key << " is missing from " << b_path;
    EXPECT_EQ(tensor.sizes(), b.tensors.at(key).sizes()) << key;
    EXPECT_TRUE(tensor.sizes() == b.tensors.at(key).sizes() && torch::equal(tensor, b.tensors.at(key)))
        << key << " differs";
    ++compared;
  }
  EXPECT_GT(compared, 10);
  for (const auto& [key, tensor] : b.tensors) {
    if (key.rfind("optimizer.", 0) == 0) EXPECT_TRUE(a.tensors.count(key)) << key << " only in " << b_path;
  }
}

// The "adamw state N bytes per rank" of the start line.
int64_t stateBytes(const std::string& output) {
  const size_t end = output.find(" bytes per rank");
  if (end == std::string::npos) return -1;
  const size_t begin = output.rfind(" state ", end);
  return begin == std::string::npos ? -1 : std::stoll(output.substr(begin + 7, end - begin - 7));
}

std::string checkpointOf(const TempDir& dir, int step) {
  char name[32];
  std::snprintf(name, sizeof(name), "ckpt-%09d.dtck", step);
  return dir / name;
}

TEST(ShardOptimizerTest, AdamWWithClippingAndAccumulationEqualsReplicated) {
  TempDir replicated("dtrain-shard-none"), sharded("dtrain-shard-opt");
  const std::string common = kAdamW + "--tokens-per-step 512 --max-steps 6 --checkpoint-every 6 ";
  auto a = runCommand(launch(2, common + "--shard none --checkpoint-dir " + replicated.path()), 300);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = runCommand(launch(2, common + "--shard optimizer --checkpoint-dir " + sharded.path()), 300);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  expectSameState(checkpointOf(replicated, 6), checkpointOf(sharded, 6));
  // Each rank holds half the AdamW state (two moments of every slab, up to
  // the padding that makes slabs split evenly), counted from its tensors.
  const int64_t whole = stateBytes(a.output), half = stateBytes(b.output);
  EXPECT_TRUE(testing::contains(b.output, "(sharded over 2 ranks, ZeRO-1)")) << b.output;
  EXPECT_GT(whole, 0) << a.output;
  EXPECT_GE(half, whole / 2) << b.output;
  EXPECT_LE(half, whole / 2 + 2 * 8 * 64 * 4 + 64) << "padding is at most 64 x ranks elements per slab";
}

TEST(ShardOptimizerTest, SgdWithMomentumOnThreeRanksEqualsReplicated) {
  TempDir replicated("dtrain-shard-sgd-none"), sharded("dtrain-shard-sgd-opt");
  const std::string common = "--optimizer sgd --lr 0.05 --momentum 0.9 --weight-decay 1e-4 --max-steps 5 "
                             "--checkpoint-every 5 ";
  auto a = runCommand(launch(3, common + "--shard none --checkpoint-dir " + replicated.path()), 300);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = runCommand(launch(3, common + "--shard optimizer --checkpoint-dir " + sharded.path()), 300);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  expectSameState(checkpointOf(replicated, 5), checkpointOf(sharded, 5));
}

// A sharded run's checkpoint, resumed without sharding, continues exactly as
// a run that was never sharded; one written by 2 ranks loads on 3.
TEST(ShardOptimizerTest, ShardedCheckpointsResumeReplicatedAndOnAnotherWorldSize) {
  TempDir plain("dtrain-shard-plain"), mixed("dtrain-shard-mixed");
  auto a = runCommand(launch(2, kAdamWConstant + "--max-steps 8 --checkpoint-every 4 --checkpoint-dir " + plain.path()), 300);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = runCommand(
      launch(2, kAdamWConstant + "--shard optimizer --max-steps 4 --checkpoint-every 4 --checkpoint-dir " + mixed.path()),
      300);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  expectSameState(checkpointOf(plain, 4), checkpointOf(mixed, 4));
  auto c = runCommand(launch(2, kAdamWConstant + "--shard none --max-steps 8 --checkpoint-every 4 --resume auto "
                                         "--checkpoint-dir " + mixed.path()),
                      300);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  expectSameState(checkpointOf(plain, 8), checkpointOf(mixed, 8));

  // 2 ranks' checkpoint, 3 sharded ranks: it loads (the state has the
  // unsharded layout) and training goes on.
  TempDir three("dtrain-shard-three");
  ASSERT_EQ(runCommand("cp " + checkpointOf(mixed, 4) + " " + three.path() + "/", 10).exit_code, 0);
  auto d = runCommand(launch(3, kAdamWConstant + "--shard optimizer --max-steps 6 --checkpoint-every 6 --resume auto "
                                         "--checkpoint-dir " + three.path()),
                      300);
  ASSERT_EQ(d.exit_code, 0) << d.output;
  const CheckpointState resumed = loadCheckpoint(checkpointOf(three, 6));
  EXPECT_EQ(resumed.meta["world_size"], 3);
  EXPECT_EQ(resumed.meta["step"], 6);
}

}  // namespace
}  // namespace dtrain
