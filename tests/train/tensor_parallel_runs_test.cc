// `dtrain train --tp` end to end as real processes on Gloo: tensor (and
// sequence) parallelism trains gpt2 and llama as one rank does, alone and
// with ZeRO or replicas over the data-parallel ranks; hybrid sharding
// (--dp-replicate with --shard) trains as sharding over every rank; its checkpoints hold
// the whole model's tensors and move between tp sizes, stages and world
// sizes; a tp rank SIGKILLed mid-run is restarted by the launcher and the
// group ends as an uninterrupted run; bad combinations exit 2 naming them.
//
// Tolerance: tensor parallelism sums each row-parallel product's partial
// results over the ranks and the column-parallel products' gradients over
// them, so float32 sums are added in another order than one rank adds
// them; the runs agree to rounding, which AdamW carries into the weights:
// its update m / sqrt(v) of a coordinate whose gradient is near zero moves
// by up to lr for a rounding difference. So after 8 steps of lr 3e-3 a
// tensor may differ by kClose (2e-5) of its largest value plus kAbsolute
// (1e-5, a 300th of one step); measured: at most 2.7e-6.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "tests/support/bad_input.h"
#include "tests/support/checkpoint_view.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"
#include "tests/train/train_runs.h"

namespace dtrain {
namespace {
using testing::checkpointOf;
using testing::CheckpointView;
using testing::contains;
using testing::differenceOf;
using testing::dtrainBin;
using testing::expectSameState;
using testing::readCheckpoint;
using testing::runCommand;
using testing::TempDir;

constexpr double kClose = 2e-5;
constexpr double kAbsolute = 1e-5;

const std::string kTinyLm = "--layers 2 --dim 32 --heads 4 --seq-len 32 --vocab-size 320 --dataset text "
                            "--tokenizer byte --batch-size 4 --seed 5 --progress none --eval-batches 2 "
                            "--optimizer adamw --lr 3e-3 --weight-decay 0.1 --clip-grad-norm 0.5 "
                            // The schedule these tolerances were set for (language models' own defaults warm up
                            // faster and with beta2 0.95, which a few ulps between layouts grow on more).
                            "--beta2 0.999 --warmup 0.2 --min-lr 0 ";

std::string tpRun(int ranks, const std::string& model, const std::string& args, const std::string& launcher = "") {
  return testing::launchTrain(ranks, "--model " + model + " " + kTinyLm + args, launcher);
}

// The model tensors of two checkpoints agree within kClose of their scale;
// both hold the same tensors (the whole model's names and shapes).
void expectCloseModels(const std::string& a_path, const std::string& b_path) {
  const CheckpointView a = readCheckpoint(a_path), b = readCheckpoint(b_path);
  int compared = 0;
  double worst = 0;
  for (const auto& [key, tensor] : a.tensors) {
    if (key.rfind("model.param.", 0) != 0 && key.rfind("optimizer.", 0) != 0) continue;
    ASSERT_TRUE(b.tensors.count(key)) << key << " is missing from " << b_path;
    ASSERT_EQ(tensor.shape, b.tensors.at(key).shape) << key;
    if (key.rfind("model.param.", 0) != 0) continue;
    const testing::TensorDifference d = differenceOf(tensor, b.tensors.at(key));
    worst = std::max(worst, d.largest);
    EXPECT_LE(d.largest, kClose * d.scale + kAbsolute) << key << ": " << d.largest << " of " << d.scale;
    ++compared;
  }
  EXPECT_GT(compared, 5);
  for (const auto& [key, tensor] : b.tensors) {
    if (key.rfind("model.param.", 0) == 0) {
      EXPECT_TRUE(a.tensors.count(key)) << key << " only in " << b_path;
    }
  }
  std::printf("largest difference: %.3g\n", worst);
}

// 2 tp ranks train as 1 rank: gpt2 (sequence parallelism on and off) and
// llama with fewer key/value heads than tp (replicated) and as many (split).
TEST(TensorParallelRunsTest, TwoRanksTrainAsOneForGpt2AndLlama) {
  struct Case {
    std::string model, flags;
  };
  const Case cases[] = {{"gpt2", ""},
                        {"gpt2", "--no-sequence-parallel "},
                        {"llama", "--kv-heads 1 "},
                        {"llama", "--kv-heads 2 "}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model + " " + c.flags);
    TempDir one("dtrain-tp-one"), two("dtrain-tp-two");
    const std::string common = c.flags + "--max-steps 8 --checkpoint-every 8 --checkpoint-dir ";
    auto a = runCommand(tpRun(1, c.model, common + one.path()), 300);
    ASSERT_EQ(a.exit_code, 0) << a.output;
    auto b = runCommand(tpRun(2, c.model, common + two.path() + " --tp 2 --progress lines"), 300);
    ASSERT_EQ(b.exit_code, 0) << b.output;
    const bool sp = c.flags.find("no-sequence") == std::string::npos;
    EXPECT_TRUE(contains(b.output, std::string("(dp_replicate 1 x dp_shard 1 x tp 2") +
                                       (sp ? ", sequence parallel)" : ")")))
        << b.output;
    expectCloseModels(checkpointOf(one, 8), checkpointOf(two, 8));
    EXPECT_EQ(readCheckpoint(checkpointOf(two, 8)).meta["tp"], 2);
  }
}

// tp 2 x 2 data-parallel ranks, with ZeRO-3 and with replicas, train as 2
// data-parallel ranks do.
TEST(TensorParallelRunsTest, TpTimesZeroOrReplicasTrainsAsDataParallel) {
  TempDir dp("dtrain-tp-dp"), zero3("dtrain-tp-zero3"), replicas("dtrain-tp-replicas");
  const std::string common = "--kv-heads 2 --max-steps 8 --checkpoint-every 8 --checkpoint-dir ";
  auto a = runCommand(tpRun(2, "llama", common + dp.path() + " --shard full"), 300);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = runCommand(tpRun(4, "llama", common + zero3.path() + " --shard full --tp 2 --progress lines"), 300);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_TRUE(contains(b.output, "(dp_replicate 1 x dp_shard 2 x tp 2, sequence parallel)")) << b.output;
  EXPECT_TRUE(contains(b.output, "(sharded over 2 ranks, ZeRO-3)")) << b.output;
  expectCloseModels(checkpointOf(dp, 8), checkpointOf(zero3, 8));
  auto c = runCommand(tpRun(4, "llama", common + replicas.path() + " --tp 2 --dp-replicate 2 --progress lines"), 300);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_TRUE(contains(c.output, "(dp_replicate 2 x dp_shard 1 x tp 2, sequence parallel)")) << c.output;
  expectCloseModels(checkpointOf(dp, 8), checkpointOf(replicas, 8));
}

// Hybrid sharding: ZeRO-3 within 2 ranks, 2 replicas of that, trains as
// ZeRO-3 over all 4 (the same 4 data shares).
TEST(TensorParallelRunsTest, HybridShardingTrainsAsShardingOverEveryRank) {
  TempDir flat("dtrain-hsdp-flat"), hybrid("dtrain-hsdp-hybrid");
  const std::string common = "--kv-heads 2 --max-steps 8 --checkpoint-every 8 --shard full --checkpoint-dir ";
  auto a = runCommand(tpRun(4, "llama", common + flat.path()), 300);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = runCommand(tpRun(4, "llama", common + hybrid.path() + " --dp-replicate 2 --progress lines"), 300);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_TRUE(contains(b.output, "(dp_replicate 2 x dp_shard 2 x tp 1)")) << b.output;
  EXPECT_TRUE(contains(b.output, "(sharded over 2 ranks, ZeRO-3)")) << b.output;
  expectCloseModels(checkpointOf(flat, 8), checkpointOf(hybrid, 8));
}

// A checkpoint of (tp 2, ZeRO-3 over 2) resumes replicated at tp 1 and goes
// on as the never-resharded run does; loaded at (tp 1, dp 4), (tp 4, ZeRO-1),
// back at (tp 2, ZeRO-2) and under hybrid ZeRO-2 (2 replicas of 2), each
// saves the very tensors it loaded.
TEST(TensorParallelRunsTest, CheckpointsMoveBetweenTpSizesStagesAndWorlds) {
  TempDir full("dtrain-tp-full"), resumed("dtrain-tp-resumed");
  const std::string common = "--kv-heads 2 --checkpoint-every 4 ";
  auto a = runCommand(tpRun(4, "llama", common + "--tp 2 --shard full --max-steps 8 --checkpoint-dir " + full.path()),
                      300);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(runCommand("cp -r " + checkpointOf(full, 4) + " " + resumed.path() + "/", 10).exit_code, 0);
  auto b = runCommand(tpRun(2, "llama", common + "--max-steps 8 --resume auto --checkpoint-dir " + resumed.path()), 300);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_TRUE(contains(b.output, "resuming from")) << b.output;
  expectCloseModels(checkpointOf(full, 8), checkpointOf(resumed, 8));

  struct Layout {
    int ranks;
    std::string flags;
  };
  const Layout layouts[] = {{4, "--shard none"},
                            {4, "--tp 4 --shard optimizer"},
                            {4, "--tp 2 --shard gradients"},
                            {4, "--dp-replicate 2 --shard gradients"}};
  std::string from = checkpointOf(full, 4);
  for (const Layout& layout : layouts) {
    SCOPED_TRACE(layout.flags);
    TempDir saved("dtrain-tp-layout");
    auto r = runCommand(tpRun(layout.ranks, "llama", "--kv-heads 2 --max-steps 4 --resume " + from + " --checkpoint-dir " +
                                                         saved.path() + " " + layout.flags),
                        300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expectSameState(checkpointOf(full, 4), checkpointOf(saved, 4));
    const std::string next = testing::makeTempDir("dtrain-tp-chain");
    ASSERT_EQ(runCommand("cp -r " + checkpointOf(saved, 4) + " " + next + "/", 10).exit_code, 0);
    from = next + "/ckpt-000000004";
  }
}

// A tp rank SIGKILLed after step 3 of 6: the launcher restarts the group,
// which resumes from the step-3 checkpoint and ends with the bits of a run
// that was never interrupted.
TEST(TensorParallelRunsTest, KilledTpRankRestartsAndEndsAsUninterrupted) {
  TempDir clean("dtrain-tp-clean"), killed("dtrain-tp-killed");
  const std::string common = "--tp 2 --max-steps 6 --checkpoint-every 3 --resume auto --checkpoint-dir ";
  auto a = runCommand(tpRun(2, "gpt2", common + clean.path()), 300);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = runCommand("DTRAIN_FAULT_KILL_AT=1:3 " + tpRun(2, "gpt2", common + killed.path(), "--max-restarts 1"), 300);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_TRUE(contains(b.output, "kills itself after step 3")) << b.output;
  expectSameState(checkpointOf(clean, 6), checkpointOf(killed, 6));
}

// One line naming the numbers, exit 2, before any rank trains.
TEST(TensorParallelRunsTest, BadCombinationsExitTwoNamingThem) {
  const std::string solo = "env -u RANK -u WORLD_SIZE " + dtrainBin() + " train --cache-dir " +
                           testing::corpusCacheDir() + " --max-steps 1 ";
  struct Case {
    std::string args, expected;
  };
  const Case cases[] = {
      {"--model gpt2 " + kTinyLm + "--tp 3", "--tp 3: --model gpt2's attention heads (4) do not split into 3"},
      {"--model llama " + kTinyLm + "--dim 48 --heads 12 --kv-heads 6 --ffn-dim 96 --tp 4",
       "--tp 4: its key/value heads (6) do not split into 4 equal parts"},
      {"--model llama " + kTinyLm + "--dim 48 --heads 6 --kv-heads 2 --ffn-dim 96 --tp 3",
       "2 key/value heads, fewer than --tp, are replicated, tp / 2 ranks each, which needs --tp a multiple of 2"},
      {"--model llama " + kTinyLm + "--heads 8 --dim 64 --kv-heads 2 --ffn-dim 100 --tp 8",
       "the MLP's hidden units (100) do not split into 8 equal parts"},
      {"--model gpt2 " + kTinyLm + "--vocab-size 321 --tp 2", "the vocabulary's entries (321)"},
      {"--model gpt2 " + kTinyLm + "--seq-len 31 --tp 2",
       "the sequence's positions (--seq-len, split by sequence parallelism) (31)"},
      {"--model cnn --dataset synthetic --tp 2", "tensor parallelism splits the transformer language models"},
      {"--model gpt2 " + kTinyLm + "--tp 0", "--tp"},
      {"--model gpt2 " + kTinyLm + "--tp 2", "--tp 2 x --dp-replicate 1 = 2 ranks does not divide the world of 1"},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(testing::exitsTwoSaying(runCommand(solo + c.args + " 2>&1", 60), c.expected)) << c.args;
  }
  auto replicas = runCommand(tpRun(2, "gpt2", "--dp-replicate 4 --max-steps 1"), 120);
  EXPECT_TRUE(testing::exitsTwoSaying(replicas, "--tp 1 x --dp-replicate 4 = 4 ranks does not divide the world of 2"))
      << replicas.output;
  auto world = runCommand(tpRun(3, "gpt2", "--tp 2 --max-steps 1"), 120);
  EXPECT_TRUE(testing::exitsTwoSaying(world, "does not divide the world of 3 ranks")) << world.output;
}

}  // namespace
}  // namespace dtrain
