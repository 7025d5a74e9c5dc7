// `dtrain train --shard full` (ZeRO-3) end to end as real processes on
// Gloo: 2 ranks end with the same bits as replicated training where the
// arithmetic is the same; the start line reports each rank's share of
// parameters, gradients and state; a checkpoint resumes under another stage
// and world size; a rank SIGKILLed mid-run is restarted by the launcher and
// the group ends bitwise equal to an uninterrupted run; bad combinations
// exit 2 naming the flags. (--precision fp16 needs CUDA's autocast: the
// sharded loss scaler is tested in zero3_test.cc.)
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tests/support/checkpoint_view.h"
#include "tests/support/bad_input.h"
#include "tests/support/command.h"
#include "tests/support/ports.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"
#include "tests/train/train_runs.h"

namespace dtrain {
namespace {
using testing::bytesPerRank;
using testing::checkpointOf;
using testing::CheckpointView;
using testing::contains;
using testing::dtrainBin;
using testing::expectSameState;
using testing::freePort;
using testing::readCheckpoint;
using testing::runCommand;
using testing::TempDir;

const std::string kTinyGptThreeLayers = "--model gpt2 --layers 3 --dim 32 --heads 4 --seq-len 32 --vocab-size 320 "
                             "--dataset text --tokenizer byte --batch-size 4 --seed 5 --progress none ";
const std::string kFullAdamW = "--optimizer adamw --lr 3e-3 --beta2 0.95 --weight-decay 0.1 --warmup-steps 2 "
                           "--schedule constant ";

std::string launchFull(int ranks, const std::string& args, const std::string& launcher_flags = "") {
  return testing::launchTrain(ranks, kTinyGptThreeLayers + args, launcher_flags);
}

// Replicated and ZeRO-3 on 2 ranks, then the ZeRO-3 checkpoint resumed
// replicated (it continues as the replicated run does) and on 3 ZeRO-3
// ranks (it loads and trains on).
TEST(ShardFullTest, TwoRanksEqualReplicatedAndCheckpointsMoveBetweenStagesAndWorldSizes) {
  TempDir plain("dtrain-zero3-plain"), sharded("dtrain-zero3-sharded");
  const std::string common = kFullAdamW + "--checkpoint-every 4 ";
  auto a = runCommand(launchFull(2, common + "--shard none --max-steps 8 --checkpoint-dir " + plain.path()), 300);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = runCommand(launchFull(2, common + "--shard full --max-steps 4 --checkpoint-dir " + sharded.path()), 300);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_TRUE(contains(b.output, "(sharded over 2 ranks, ZeRO-3)")) << b.output;
  expectSameState(checkpointOf(plain, 4), checkpointOf(sharded, 4));
  // Each rank's parameters and AdamW state, from the start lines (how they
  // shrink with the ranks: zero3_test.cc; this model's root unit, with
  // GPT-2's 1024-row position table, is a third of it).
  EXPECT_GT(bytesPerRank(b.output, "parameters"), 0) << b.output;
  EXPECT_LT(bytesPerRank(b.output, "state"), bytesPerRank(a.output, "state") * 0.6) << b.output;

  auto c = runCommand(
      launchFull(2, common + "--shard none --max-steps 8 --resume auto --checkpoint-dir " + sharded.path()), 300);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  expectSameState(checkpointOf(plain, 8), checkpointOf(sharded, 8));

  TempDir three("dtrain-zero3-three");
  ASSERT_EQ(runCommand("cp -r " + checkpointOf(sharded, 4) + " " + three.path() + "/", 10).exit_code, 0);
  auto d = runCommand(launchFull(3, common + "--shard full --max-steps 6 --checkpoint-every 6 --resume auto "
                                         "--checkpoint-dir " + three.path()),
                      300);
  ASSERT_EQ(d.exit_code, 0) << d.output;
  const CheckpointView resumed = readCheckpoint(checkpointOf(three, 6));
  EXPECT_EQ(resumed.meta["world_size"], 3);
  EXPECT_EQ(resumed.meta["step"], 6);
}

// A rank SIGKILLed after step 3 of 6: the launcher restarts the group, which
// resumes from the step-3 checkpoint (gathering from the shards it loaded)
// and ends with the bits of a run that was never interrupted.
TEST(ShardFullTest, KilledRankResumesAndEndsBitwiseEqual) {
  TempDir clean("dtrain-zero3-clean"), killed("dtrain-zero3-killed");
  const std::string common = kFullAdamW + "--shard full --max-steps 6 --checkpoint-every 3 --resume auto ";
  auto a = runCommand(launchFull(2, common + "--checkpoint-dir " + clean.path()), 300);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = runCommand("DTRAIN_FAULT_KILL_AT=1:3 " + launchFull(2, common + "--checkpoint-dir " + killed.path(),
                                                           "--max-restarts 1"),
                      300);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_TRUE(contains(b.output, "kills itself after step 3")) << b.output;
  expectSameState(checkpointOf(clean, 6), checkpointOf(killed, 6));
}

TEST(ShardFullTest, BadCombinationsExitTwoNamingTheFlags) {
  const std::string solo = "env -u RANK -u WORLD_SIZE " + dtrainBin() + " train --progress none ";
  auto cnn = runCommand(solo + "--model cnn --dataset synthetic --shard full --max-steps 1", 60);
  EXPECT_TRUE(testing::exitsTwoSaying(cnn, "sharding units")) << cnn.output;
  auto reduce = runCommand(solo + "--model cnn --dataset synthetic --reduce-dtype bf16 --max-steps 1", 60);
  EXPECT_TRUE(testing::exitsTwoSaying(reduce, "--reduce-dtype bf16 with --shard none")) << reduce.output;
  // A job that cannot fit the memory it may plan for stops before training,
  // with the estimate (DTRAIN_DEVICE_MEMORY_BYTES stands in for a small GPU).
  auto small = runCommand("DTRAIN_DEVICE_MEMORY_BYTES=200000 " + solo + kTinyGptThreeLayers + "--cache-dir " + testing::corpusCacheDir() +
                              " --max-steps 1",
                          60);
  EXPECT_TRUE(testing::exitsTwoSaying(small, "does not fit on cpu (0.19 MiB): memory per rank (estimate)"))
      << small.output;
  auto dtype = runCommand(solo + kTinyGptThreeLayers + "--cache-dir " + testing::corpusCacheDir() + " --shard full --reduce-dtype fp16", 60);
  EXPECT_TRUE(testing::exitsTwoSaying(dtype, "--reduce-dtype 'fp16': unknown; expected one of fp32 or bf16"))
      << dtype.output;
}

}  // namespace
}  // namespace dtrain
