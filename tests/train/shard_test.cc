// `dtrain train --shard optimizer|gradients` (ZeRO-1, ZeRO-2) end to end as
// real processes on Gloo: ZeRO-1 ends with the same bits as replicated
// training (AdamW with clipping and accumulation, SGD with momentum); ZeRO-2
// does where its arithmetic is the same (2 ranks, no clipping, no
// accumulation) and is within rounding where it is not (see
// kAdamWRounding); each rank holds 1/N of the state (and, ZeRO-2, of the
// gradients); their sharded checkpoints hold the state per parameter (a
// replicated run resumes one and continues bit for bit), and they load on
// another world size.
#include <gtest/gtest.h>

#include <algorithm>
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
using testing::differenceOf;
using testing::dtrainBin;
using testing::expectSameState;
using testing::freePort;
using testing::readCheckpoint;
using testing::runCommand;
using testing::StoredTensor;
using testing::TempDir;

const std::string& kTinyGpt = testing::kTinyGptRun;
const std::string kShardAdamW = "--optimizer adamw --lr 3e-3 --beta2 0.95 --weight-decay 0.1 --warmup-steps 2 "
                           "--schedule cosine --clip-grad-norm 0.5 ";
// The same without clipping, and with a schedule that does not depend on
// the run's length.
const std::string kAdamWNoClip = "--optimizer adamw --lr 3e-3 --beta2 0.95 --weight-decay 0.1 --warmup-steps 2 "
                                 "--schedule constant ";
// The same without a schedule that depends on the run's length (runs of
// different --max-steps follow the same learning rates).
const std::string kAdamWConstant = "--optimizer adamw --lr 3e-3 --beta2 0.95 --weight-decay 0.1 --warmup-steps 2 "
                                   "--schedule constant --clip-grad-norm 0.5 ";

std::string launchShard(int ranks, const std::string& args, const std::string& model = kTinyGpt) {
  return testing::launchTrain(ranks, model + args);
}

// Every model and optimizer tensor of the two checkpoints, within float32
// rounding: the largest difference of a tensor at most `relative` times the
// largest magnitude in it. (ZeRO-2 sums the same numbers in another order
// where gradients are accumulated or clipped: see the tests.)
void expectCloseState(const std::string& a_path, const std::string& b_path, double relative) {
  const CheckpointView a = readCheckpoint(a_path), b = readCheckpoint(b_path);
  int compared = 0, differing = 0;
  double worst = 0;
  for (const auto& [key, tensor] : a.tensors) {
    if (key.rfind("model.", 0) != 0 && key.rfind("optimizer.", 0) != 0) continue;
    ASSERT_TRUE(b.tensors.count(key)) << key << " is missing from " << b_path;
    const StoredTensor& other = b.tensors.at(key);
    ASSERT_EQ(tensor.shape, other.shape) << key;
    ++compared;
    if (tensor == other) continue;
    ++differing;
    const auto [diff, scale] = differenceOf(tensor, other);
    worst = std::max(worst, diff / scale);
    EXPECT_LE(diff, relative * scale) << key << ": largest difference " << diff << ", largest magnitude " << scale;
  }
  EXPECT_GT(compared, 10);
  std::printf("%d of %d tensors differ; largest difference / magnitude %.3g\n", differing, compared, worst);
}

// The "adamw state N bytes per rank" of the start line.
int64_t stateBytes(const std::string& output) { return bytesPerRank(output, "state"); }

// The same run replicated (into `replicated`) and with `--shard shard`
// (into `sharded`); both must exit 0. Call with ASSERT_NO_FATAL_FAILURE.
void runReplicatedAndSharded(int ranks, const std::string& common, const std::string& shard,
                             const TempDir& replicated, const TempDir& sharded, testing::CommandResult* a, testing::CommandResult* b) {
  *a = runCommand(launchShard(ranks, common + "--shard none --checkpoint-dir " + replicated.path()), 300);
  ASSERT_EQ(a->exit_code, 0) << a->output;
  *b = runCommand(launchShard(ranks, common + "--shard " + shard + " --checkpoint-dir " + sharded.path()), 300);
  ASSERT_EQ(b->exit_code, 0) << b->output;
}

// Resumes (or starts) a run of `args` on 3 ranks in `dir` up to step 6,
// which must exit 0. Call with ASSERT_NO_FATAL_FAILURE.
void resumeOnThreeRanksToStep6(const std::string& args, const TempDir& dir) {
  auto run = runCommand(
      launchShard(3, args + "--max-steps 6 --checkpoint-every 6 --resume auto --checkpoint-dir " + dir.path()), 300);
  ASSERT_EQ(run.exit_code, 0) << run.output;
}

TEST(ShardOptimizerTest, AdamWWithClippingAndAccumulationEqualsReplicated) {
  TempDir replicated("dtrain-shard-none"), sharded("dtrain-shard-opt");
  const std::string common = kShardAdamW + "--tokens-per-step 512 --max-steps 6 --checkpoint-every 6 ";
  testing::CommandResult a, b;
  ASSERT_NO_FATAL_FAILURE(runReplicatedAndSharded(2, common, "optimizer", replicated, sharded, &a, &b));
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
  testing::CommandResult a, b;
  ASSERT_NO_FATAL_FAILURE(runReplicatedAndSharded(3, common, "optimizer", replicated, sharded, &a, &b));
  expectSameState(checkpointOf(replicated, 5), checkpointOf(sharded, 5));
}

// A sharded run's checkpoint, resumed without sharding, continues exactly as
// a run that was never sharded; one written by 2 ranks loads on 3.
TEST(ShardOptimizerTest, ShardedCheckpointsResumeReplicatedAndOnAnotherWorldSize) {
  TempDir plain("dtrain-shard-plain"), mixed("dtrain-shard-mixed");
  auto a = runCommand(launchShard(2, kAdamWConstant + "--max-steps 8 --checkpoint-every 4 --checkpoint-dir " + plain.path()), 300);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = runCommand(
      launchShard(2, kAdamWConstant + "--shard optimizer --max-steps 4 --checkpoint-every 4 --checkpoint-dir " + mixed.path()),
      300);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  expectSameState(checkpointOf(plain, 4), checkpointOf(mixed, 4));
  auto c = runCommand(launchShard(2, kAdamWConstant + "--shard none --max-steps 8 --checkpoint-every 4 --resume auto "
                                         "--checkpoint-dir " + mixed.path()),
                      300);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  expectSameState(checkpointOf(plain, 8), checkpointOf(mixed, 8));

  // 2 ranks' checkpoint, 3 sharded ranks: it loads (the state has the
  // unsharded layout) and training goes on.
  TempDir three("dtrain-shard-three");
  ASSERT_EQ(runCommand("cp -r " + checkpointOf(mixed, 4) + " " + three.path() + "/", 10).exit_code, 0);
  ASSERT_NO_FATAL_FAILURE(resumeOnThreeRanksToStep6(kAdamWConstant + "--shard optimizer ", three));
  const CheckpointView resumed = readCheckpoint(checkpointOf(three, 6));
  EXPECT_EQ(resumed.meta["world_size"], 3);
  EXPECT_EQ(resumed.meta["step"], 6);
}

// How far AdamW runs may part when their gradients differ in the last bits:
// an element whose true gradient is 0 (the attention's key bias: softmax
// ignores a shift of every score) gets a gradient of pure rounding noise,
// which AdamW scales to a full-size step, so a last-bit change moves it by
// a fraction of the learning rate. Seen: up to 6e-5 of the tensor's
// magnitude after 6 steps, in those biases only; SGD stays below 5e-7.
constexpr double kAdamWRounding = 1e-3;
constexpr double kSgdRounding = 1e-5;

// ZeRO-2 against replicated training, on AdamW with clipping and gradient
// accumulation. Not bitwise: each micro-batch's gradients are averaged over
// the ranks and then summed in the shard (replicated training sums locally,
// then averages), and the global norm sums per-slice squares (replicated
// training: per-slab ones), so the last bits differ.
TEST(ShardGradientsTest, AdamWWithClippingAndAccumulationMatchesReplicated) {
  TempDir replicated("dtrain-zero2-none"), sharded("dtrain-zero2-grad");
  const std::string common = kShardAdamW + "--tokens-per-step 512 --max-steps 6 --checkpoint-every 6 ";
  testing::CommandResult a, b;
  ASSERT_NO_FATAL_FAILURE(runReplicatedAndSharded(2, common, "gradients", replicated, sharded, &a, &b));
  EXPECT_TRUE(testing::contains(b.output, "(sharded over 2 ranks, ZeRO-2)")) << b.output;
  expectCloseState(checkpointOf(replicated, 6), checkpointOf(sharded, 6), kAdamWRounding);
  const int64_t whole = stateBytes(a.output), half = stateBytes(b.output);
  EXPECT_GE(half, whole / 2) << b.output;
  EXPECT_LE(half, whole / 2 + 2 * 8 * 64 * 4 * 4) << "padding is at most 64 x ranks elements per bucket";
}

// Where ZeRO-2 does the same arithmetic as replicated training, it ends with
// the same bits: 2 ranks (a sum of two is the same in either order), one
// micro-batch, no clipping.
TEST(ShardGradientsTest, TwoRanksWithoutClippingOrAccumulationEqualReplicatedBitwise) {
  TempDir replicated("dtrain-zero2-bits-none"), sharded("dtrain-zero2-bits-grad");
  const std::string common = kAdamWNoClip + "--max-steps 5 --checkpoint-every 5 --bucket-mb 0.02 ";
  testing::CommandResult a, b;
  ASSERT_NO_FATAL_FAILURE(runReplicatedAndSharded(2, common, "gradients", replicated, sharded, &a, &b));
  expectSameState(checkpointOf(replicated, 5), checkpointOf(sharded, 5));
}

// SGD with momentum and weight decay on 3 ranks. Not bitwise: Gloo's ring
// sums each element in an order set by where the element falls in the
// buffer's segments, and a ZeRO-2 bucket is padded to a multiple of 64 x 3
// elements, which moves the segment boundaries (a sum of three rounds
// differently in another order).
TEST(ShardGradientsTest, SgdWithMomentumOnThreeRanksMatchesReplicated) {
  TempDir replicated("dtrain-zero2-sgd-none"), sharded("dtrain-zero2-sgd-grad");
  const std::string common = "--optimizer sgd --lr 0.05 --momentum 0.9 --weight-decay 1e-4 --max-steps 5 "
                             "--checkpoint-every 5 --bucket-mb 0.02 ";
  testing::CommandResult a, b;
  ASSERT_NO_FATAL_FAILURE(runReplicatedAndSharded(3, common, "gradients", replicated, sharded, &a, &b));
  expectCloseState(checkpointOf(replicated, 5), checkpointOf(sharded, 5), kSgdRounding);
}

// Gradient memory per rank, from the tensors each rank holds: the whole
// gradient when replicated; with ZeRO-2 a 1/N shard (plus at most 64
// elements of padding per bucket) and two staging buffers of the largest
// bucket. Small buckets keep those small: here the largest holds one
// parameter, a 320 x 64 embedding (80 KiB of a ~1 MiB gradient; GPT-2's
// 1024-row position table would dominate a model this small).
TEST(ShardGradientsTest, EachRankHoldsItsShareOfTheGradients) {
  const std::string llama = "--model llama --layers 4 --dim 64 --heads 4 --kv-heads 2 --seq-len 32 --vocab-size 320 "
                            "--dataset text --tokenizer byte --batch-size 4 --seed 5 --progress none ";
  const std::string common = kAdamWNoClip + "--max-steps 1 --bucket-mb 0.02 ";
  auto none = runCommand(launchShard(2, common + "--shard none", llama), 300);
  ASSERT_EQ(none.exit_code, 0) << none.output;
  auto two = runCommand(launchShard(2, common + "--shard gradients", llama), 300);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  auto three = runCommand(launchShard(3, common + "--shard gradients", llama), 300);
  ASSERT_EQ(three.exit_code, 0) << three.output;
  const int64_t whole = bytesPerRank(none.output, "gradients");
  const int64_t half = bytesPerRank(two.output, "gradients"), third = bytesPerRank(three.output, "gradients");
  const int64_t largest_bucket = 320 * 64 * 4, padding = 64 * 4 * 64;
  EXPECT_GT(whole, 1000000) << none.output;
  EXPECT_GE(half, whole / 2 + 2 * largest_bucket) << two.output;
  EXPECT_LE(half, whole / 2 + 2 * largest_bucket + padding) << two.output;
  EXPECT_GE(third, whole / 3 + 2 * largest_bucket) << three.output;
  EXPECT_LE(third, whole / 3 + 2 * largest_bucket + padding) << three.output;
  EXPECT_LT(third, half);
  std::printf("gradient bytes per rank: %lld replicated; ZeRO-2 %lld on 2 ranks, %lld on 3\n",
              static_cast<long long>(whole), static_cast<long long>(half), static_cast<long long>(third));
}

// A ZeRO-2 checkpoint resumed without sharding continues exactly as a run
// that was never sharded (the bitwise setting: 2 ranks, no clipping or
// accumulation); one written by 2 ranks loads on 3 sharded ranks.
TEST(ShardGradientsTest, CheckpointsResumeReplicatedAndOnAnotherWorldSize) {
  TempDir plain("dtrain-zero2-plain"), mixed("dtrain-zero2-mixed");
  const std::string common = kAdamWNoClip + "--bucket-mb 0.02 ";
  const std::string every4 = common + "--checkpoint-every 4 ";
  auto a = runCommand(launchShard(2, every4 + "--max-steps 8 --checkpoint-dir " + plain.path()), 300);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = runCommand(launchShard(2, every4 + "--shard gradients --max-steps 4 --checkpoint-dir " + mixed.path()), 300);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  expectSameState(checkpointOf(plain, 4), checkpointOf(mixed, 4));
  auto c = runCommand(
      launchShard(2, every4 + "--shard none --max-steps 8 --resume auto --checkpoint-dir " + mixed.path()), 300);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  expectSameState(checkpointOf(plain, 8), checkpointOf(mixed, 8));

  // 2 ranks' checkpoint, 3 ZeRO-2 ranks: it loads and training goes on,
  // where 3 replicated ranks resumed from it go (within rounding: 3 ranks).
  TempDir three("dtrain-zero2-three"), three_plain("dtrain-zero2-three-plain");
  for (const TempDir* dir : {&three, &three_plain}) {
    ASSERT_EQ(runCommand("cp -r " + checkpointOf(mixed, 4) + " " + dir->path() + "/", 10).exit_code, 0);
  }
  ASSERT_NO_FATAL_FAILURE(resumeOnThreeRanksToStep6(common + "--shard gradients ", three));
  ASSERT_NO_FATAL_FAILURE(resumeOnThreeRanksToStep6(common + "--shard none ", three_plain));
  const CheckpointView resumed = readCheckpoint(checkpointOf(three, 6));
  EXPECT_EQ(resumed.meta["world_size"], 3);
  EXPECT_EQ(resumed.meta["step"], 6);
  expectCloseState(checkpointOf(three_plain, 6), checkpointOf(three, 6), kAdamWRounding);
}

// LoRA's adapters (the base frozen, in no slab): ZeRO-1 and ZeRO-2 on 2
// ranks end with the replicated run's bits (the bitwise setting above), and
// each holds half of the adapters' AdamW state.
TEST(ShardGradientsTest, LoraAdaptersTrainTheSameReplicatedAndUnderZero1And2) {
  TempDir replicated("dtrain-lora-none"), zero1("dtrain-lora-opt"), zero2("dtrain-lora-grad");
  const std::string common = kAdamWNoClip + "--lora-rank 4 --lora-targets q,v,o,up,down --max-steps 5 "
                                            "--checkpoint-every 5 --bucket-mb 0.02 ";
  testing::CommandResult a, b, c;
  ASSERT_NO_FATAL_FAILURE(runReplicatedAndSharded(2, common, "optimizer", replicated, zero1, &a, &b));
  c = runCommand(launchShard(2, common + "--shard gradients --checkpoint-dir " + zero2.path()), 300);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  expectSameState(checkpointOf(replicated, 5), checkpointOf(zero1, 5));
  expectSameState(checkpointOf(replicated, 5), checkpointOf(zero2, 5));
  // 2 blocks x rank 4 x (in + rows) of q, v, o (32 + 32), up (32 + 128) and down (128 + 32).
  const int64_t adapters = 2 * 4 * (3 * (32 + 32) + 2 * (32 + 128));
  EXPECT_EQ(stateBytes(a.output), 8 * adapters + 8) << "two fp32 moments per element and the step count\n"
                                                    << a.output;
  EXPECT_LE(stateBytes(b.output), 8 * adapters / 2 + 8 + 8 * 64 * 2) << b.output;
  const CheckpointView view = readCheckpoint(checkpointOf(zero2, 5));
  for (const auto& [key, tensor] : view.tensors) {
    if (key.rfind("model.param.", 0) == 0) {
      EXPECT_TRUE(testing::contains(key, ".lora_")) << key << " is no adapter";
    }
  }
}

TEST(ShardGradientsTest, UnknownShardValueExitsTwoNamingTheChoices) {
  auto r = runCommand("env -u RANK -u WORLD_SIZE " + dtrainBin() + " train --progress none --shard zero4", 60);
  EXPECT_TRUE(
      testing::exitsTwoSaying(r, "--shard 'zero4': unknown; expected one of none, optimizer, gradients or full"));
}

}  // namespace
}  // namespace dtrain
