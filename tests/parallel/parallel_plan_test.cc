// ParallelPlan (parallel/parallel_plan.h): every valid combination of the
// parallelism flags parses into its plan, every invalid one is refused with
// its one-line message; the enums' words are the flags' (and the files').
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "parallel/parallel_plan.h"
#include "tests/support/text.h"

namespace dtrain {
namespace {

using testing::configErrorOf;

const std::vector<ShardStage> kStages = {ShardStage::kNone, ShardStage::kOptimizer, ShardStage::kGradients,
                                         ShardStage::kFull};

TEST(ParallelPlanTest, TheWordsAreTheFlagsWords) {
  EXPECT_STREQ(shardStageName(ShardStage::kNone), "none");
  EXPECT_STREQ(shardStageName(ShardStage::kOptimizer), "optimizer");
  EXPECT_STREQ(shardStageName(ShardStage::kGradients), "gradients");
  EXPECT_STREQ(shardStageName(ShardStage::kFull), "full");
  EXPECT_STREQ(reduceDtypeName(ReduceDtype::kFp32), "fp32");
  EXPECT_STREQ(reduceDtypeName(ReduceDtype::kBf16), "bf16");
  EXPECT_STREQ(computePrecisionName(ComputePrecision::kFp32), "fp32");
  EXPECT_STREQ(computePrecisionName(ComputePrecision::kBf16), "bf16");
  EXPECT_STREQ(computePrecisionName(ComputePrecision::kFp16), "fp16");
  EXPECT_STREQ(commBackendName(CommBackend::kAuto), "auto");
  EXPECT_STREQ(commBackendName(CommBackend::kNccl), "nccl");
  EXPECT_STREQ(commBackendName(CommBackend::kGloo), "gloo");
}

TEST(ParallelPlanTest, EveryValidCombinationParses) {
  for (const ShardStage stage : kStages) {
    for (const ReduceDtype reduce : {ReduceDtype::kFp32, ReduceDtype::kBf16}) {
      const bool sharded_reduce = stage == ShardStage::kGradients || stage == ShardStage::kFull;
      if (reduce == ReduceDtype::kBf16 && !sharded_reduce) continue;
      for (const int world : {1, 2, 8}) {
        SCOPED_TRACE(std::string(shardStageName(stage)) + " " + reduceDtypeName(reduce) + " x" +
                     std::to_string(world));
        ParallelOptions options;
        options.shard = stage;
        options.reduce_dtype = reduce;
        options.bucket_mb = 0.5;
        const ParallelPlan plan = planParallelism(options, world, {"gpt2", true});
        EXPECT_EQ(plan.shard, stage);
        EXPECT_EQ(plan.reduce_dtype, reduce);
        EXPECT_EQ(plan.dp_shard, world);
        EXPECT_EQ(plan.dp_replicate, 1);
        EXPECT_EQ(plan.tp, 1);
        EXPECT_EQ(plan.pp, 1);
        EXPECT_EQ(plan.worldSize(), world);
        EXPECT_DOUBLE_EQ(plan.bucket_mb, 0.5);
        EXPECT_DOUBLE_EQ(plan.first_bucket_mb, 0.5) << "the first bucket is 1 MiB, or the cap if smaller";
        EXPECT_EQ(plan.shardsOptimizer(), stage != ShardStage::kNone);
        EXPECT_EQ(plan.shardsGradients(), sharded_reduce);
        EXPECT_EQ(plan.shardsParameters(), stage == ShardStage::kFull);
      }
    }
  }
}

TEST(ParallelPlanTest, TheDefaultsAreReplicatedFp32With25MiBBuckets) {
  const ParallelPlan plan = planParallelism(ParallelOptions{}, 4);
  EXPECT_EQ(plan.shard, ShardStage::kNone);
  EXPECT_EQ(plan.reduce_dtype, ReduceDtype::kFp32);
  EXPECT_DOUBLE_EQ(plan.bucket_mb, 25);
  EXPECT_DOUBLE_EQ(plan.first_bucket_mb, 1);
  EXPECT_EQ(plan.worldSize(), 4);
}

TEST(ParallelPlanTest, ABf16ReductionNeedsAShardedGradient) {
  for (const ShardStage stage : {ShardStage::kNone, ShardStage::kOptimizer}) {
    ParallelOptions options;
    options.shard = stage;
    options.reduce_dtype = ReduceDtype::kBf16;
    EXPECT_EQ(configErrorOf([&] { planParallelism(options, 2); }),
              std::string("--reduce-dtype bf16 with --shard ") + shardStageName(stage) +
                  ": only --shard gradients and full reduce from staging buffers of their own dtype; use "
                  "--reduce-dtype fp32 or one of those");
  }
}

TEST(ParallelPlanTest, ZeroThreeNeedsAModelWithShardingUnits) {
  ParallelOptions options;
  options.shard = ShardStage::kFull;
  EXPECT_EQ(configErrorOf([&] { planParallelism(options, 2, {"resnet18", false}); }),
            "--shard full with --model resnet18: ZeRO-3 gathers a model unit by unit and only the language models "
            "(gpt2, llama) have sharding units; use --shard gradients");
  options.shard = ShardStage::kGradients;
  EXPECT_EQ(configErrorOf([&] { planParallelism(options, 2, {"resnet18", false}); }), "")
      << "ZeRO-2 needs no units";
}

TEST(ParallelPlanTest, AWorldOfNoRanksIsRefused) {
  EXPECT_EQ(configErrorOf([] { planParallelism(ParallelOptions{}, 0); }), "a world of 0 ranks: expected at least 1");
}

}  // namespace
}  // namespace dtrain
