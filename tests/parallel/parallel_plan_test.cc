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

// gpt2-small's shape: 12 heads, MLP 3072, vocabulary 50304, sequence 1024.
PlannedModel gpt2Small() {
  PlannedModel model{"gpt2", true, true};
  model.heads = 12;
  model.kv_heads = 12;
  model.ffn_dim = 3072;
  model.vocab_size = 50304;
  model.seq_len = 1024;
  return model;
}

// llama-8b's: 32 heads over 8 key/value heads, MLP 14336, vocabulary 128256.
PlannedModel llama8b() {
  PlannedModel model{"llama", true, true};
  model.heads = 32;
  model.kv_heads = 8;
  model.ffn_dim = 14336;
  model.vocab_size = 128256;
  model.seq_len = 4096;
  return model;
}

TEST(ParallelPlanTest, TheMeshIsDpReplicateByDpShardByTp) {
  struct Case {
    int world, tp, dp_replicate, dp_shard;
  };
  for (const Case c : {Case{8, 2, 2, 2}, Case{4, 4, 1, 1}, Case{4, 2, 1, 2}, Case{8, 1, 4, 2}, Case{16, 8, 1, 2}}) {
    SCOPED_TRACE("world " + std::to_string(c.world) + " tp " + std::to_string(c.tp) + " dp_replicate " +
                 std::to_string(c.dp_replicate));
    ParallelOptions options;
    options.tp = c.tp;
    options.dp_replicate = c.dp_replicate;
    options.shard = ShardStage::kFull;
    const ParallelPlan plan = planParallelism(options, c.world, llama8b());
    EXPECT_EQ(plan.tp, c.tp);
    EXPECT_EQ(plan.dp_replicate, c.dp_replicate);
    EXPECT_EQ(plan.dp_shard, c.dp_shard);
    EXPECT_EQ(plan.dataParallelSize(), c.dp_replicate * c.dp_shard);
    EXPECT_EQ(plan.worldSize(), c.world);
    EXPECT_EQ(plan.sequence_parallel, c.tp > 1) << "on by default with tp > 1";
    EXPECT_EQ(plan.replicatesKvHeads(8), c.tp > 8);
  }
  ParallelOptions no_sp;
  no_sp.tp = 2;
  no_sp.sequence_parallel = false;
  EXPECT_FALSE(planParallelism(no_sp, 2, gpt2Small()).sequence_parallel);
  EXPECT_FALSE(planParallelism(ParallelOptions{}, 2, gpt2Small()).sequence_parallel) << "tp 1 has no sequence shards";
}

TEST(ParallelPlanTest, FewerKeyValueHeadsThanTpAreReplicatedWhenTheyDivideIt) {
  PlannedModel model = llama8b();
  model.kv_heads = 2;
  ParallelOptions options;
  options.tp = 8;
  EXPECT_TRUE(planParallelism(options, 8, model).replicatesKvHeads(model.kv_heads));
  model.kv_heads = 3;
  model.heads = 24;
  EXPECT_EQ(configErrorOf([&] { planParallelism(options, 8, model); }),
            "--tp 8: --model llama's 3 key/value heads, fewer than --tp, are replicated, tp / 3 ranks each, which "
            "needs --tp a multiple of 3");
}

TEST(ParallelPlanTest, EveryMeshThatDoesNotFitIsRefusedNamingTheNumbers) {
  const auto refused = [](int tp, int dp_replicate, int world, PlannedModel model, bool sp = true) {
    ParallelOptions options;
    options.tp = tp;
    options.dp_replicate = dp_replicate;
    options.sequence_parallel = sp;
    return configErrorOf([&] { planParallelism(options, world, model); });
  };
  EXPECT_EQ(refused(3, 1, 4, gpt2Small()),
            "--tp 3 x --dp-replicate 1 = 3 ranks does not divide the world of 4 ranks "
            "(pp x dp_replicate x dp_shard x tp); expected a world that is a multiple of 3");
  EXPECT_EQ(refused(2, 3, 8, gpt2Small()),
            "--tp 2 x --dp-replicate 3 = 6 ranks does not divide the world of 8 ranks "
            "(pp x dp_replicate x dp_shard x tp); expected a world that is a multiple of 6");
  EXPECT_EQ(refused(0, 1, 4, gpt2Small()), "--tp 0 --dp-replicate 1: expected both at least 1");
  EXPECT_EQ(refused(1, 0, 4, gpt2Small()), "--tp 1 --dp-replicate 0: expected both at least 1");
  EXPECT_EQ(refused(2, 1, 2, {"resnet18", false, false}),
            "--tp 2 with --model resnet18: tensor parallelism splits the transformer language models (gpt2, llama) "
            "only; use --tp 1");
  EXPECT_EQ(refused(8, 1, 8, gpt2Small()),
            "--tp 8: --model gpt2's attention heads (12) do not split into 8 equal parts; expected a --tp that "
            "divides them");
  PlannedModel kv = llama8b();
  kv.kv_heads = 12;
  kv.heads = 48;
  EXPECT_EQ(refused(8, 1, 8, kv),
            "--tp 8: its key/value heads (12) do not split into 8 equal parts; expected a --tp that divides them (or, "
            "with fewer of them than --tp, a multiple of them: each is then replicated)");
  PlannedModel ffn = gpt2Small();
  ffn.ffn_dim = 3070;
  EXPECT_EQ(refused(4, 1, 4, ffn),
            "--tp 4: the MLP's hidden units (3070) do not split into 4 equal parts; expected a --tp that divides them");
  PlannedModel vocab = gpt2Small();
  vocab.vocab_size = 50257;
  EXPECT_EQ(refused(2, 1, 2, vocab),
            "--tp 2: the vocabulary's entries (50257) do not split into 2 equal parts; expected a --vocab-size that "
            "--tp divides");
  PlannedModel seq = gpt2Small();
  seq.seq_len = 1022;
  EXPECT_EQ(refused(4, 1, 4, seq),
            "--tp 4: the sequence's positions (--seq-len, split by sequence parallelism) (1022) do not split into 4 "
            "equal parts; expected a --seq-len that --tp divides, or --no-sequence-parallel");
  seq.seq_len = 1020;  // divisible by 4, and without sequence parallelism any length
  EXPECT_EQ(refused(4, 1, 4, seq), "");
  seq.seq_len = 1022;
  EXPECT_EQ(refused(4, 1, 4, seq, false), "");
  ParallelOptions two;
  two.tp = 2;
  EXPECT_EQ(configErrorOf([&] { checkParallelOptions(two, gpt2Small()); }), "")
      << "the world-free checks pass a tp that the heads take";
}

TEST(ParallelPlanTest, AWorldOfNoRanksIsRefused) {
  EXPECT_EQ(configErrorOf([] { planParallelism(ParallelOptions{}, 0); }), "a world of 0 ranks: expected at least 1");
}

// A tiny model of 4 blocks with a tied head, as the pipeline tests train.
PlannedModel fourBlocks() {
  PlannedModel model = gpt2Small();
  model.layers = 4;
  model.tied_head = true;
  return model;
}

TEST(ParallelPlanTest, PipelinesThatCannotRunAreRefusedNamingTheNumbers) {
  const auto refused = [](const std::string& what, PlannedModel model = fourBlocks()) {
    ParallelOptions o;
    o.pp = 2;
    if (what == "pp 8") o.pp = 8;
    if (what == "M 2 < pp 4") o.pp = 4, o.microbatches = 2;
    if (what == "V 2 over 6 blocks") o.microbatches = 4, o.virtual_stages = 2, model.layers = 6;
    if (what == "split 1,2") o.pp_split = "1,2";
    if (what == "shard full") o.shard = ShardStage::kFull;
    if (what == "shard gradients") o.shard = ShardStage::kGradients;
    if (what == "M without pp") o.pp = 1, o.microbatches = 4;
    o.pp_schedule = what == "V 2 over 6 blocks" ? PipelineScheduleKind::kInterleaved1F1B : PipelineScheduleKind::k1F1B;
    return configErrorOf([&] { checkParallelOptions(o, model); });
  };
  EXPECT_EQ(refused("pp 8"),
            "8 pipeline stages (--pp x --virtual-stages) for a model of 4 blocks: expected at most one stage per block");
  EXPECT_EQ(refused("M 2 < pp 4"),
            "--microbatches 2 with --pp 4 and --pp-schedule 1f1b: fewer micro-batches than stages never fill the "
            "pipeline; expected --microbatches >= 4 (or --pp-schedule gpipe)");
  EXPECT_EQ(refused("V 2 over 6 blocks"),
            "--virtual-stages 2 x --pp 2 = 4 stages do not divide the model's 6 blocks equally; expected --layers a "
            "multiple of 4 or a --pp-split");
  EXPECT_EQ(refused("split 1,2"),
            "--pp-split '1,2' lists 2 stages of 3 blocks; expected 2 comma-separated block counts of at least 1 that "
            "add up to the model's 4 blocks");
  EXPECT_EQ(refused("shard full"),
            "--pp 2 with --shard full and a tied head: the first and the last stage sum their gradients of it, "
            "which sharded gradients do not hold whole; use --shard optimizer or none, or --tie-embeddings off");
  EXPECT_EQ(refused("shard gradients"),
            "--pp 2 with --shard gradients and a tied head: the first and the last stage sum their gradients of it, "
            "which sharded gradients do not hold whole; use --shard optimizer or none, or --tie-embeddings off");
  PlannedModel untied = fourBlocks();
  untied.tied_head = false;
  EXPECT_EQ(refused("shard gradients", untied), "");
  EXPECT_EQ(refused("shard full", untied), "");
  EXPECT_EQ(refused("M without pp"),
            "--microbatches, --virtual-stages and --pp-split shape a pipeline; with --pp 1 there is none "
            "(--tokens-per-step accumulates micro-batches without one)");
  EXPECT_EQ(refused("cnn", PlannedModel{"cnn", false}),
            "--pp 2 with --model cnn: pipeline parallelism splits the transformer language models' blocks (gpt2, "
            "llama)");
  EXPECT_EQ(refused("fine"), "");
  // The plan: pp outermost, the stages and the schedule's sizes.
  ParallelOptions o;
  o.pp = 2;
  o.tp = 2;
  const ParallelPlan plan = planParallelism(o, 8, fourBlocks());
  EXPECT_EQ(plan.pp, 2);
  EXPECT_EQ(plan.dp_shard, 2);
  EXPECT_EQ(plan.microbatches, 2) << "--microbatches defaults to --pp";
  EXPECT_EQ(formatPipelineStages(plan.stages), "0-1 | 2-3");
  EXPECT_EQ(configErrorOf([&] { planParallelism(o, 6, fourBlocks()); }),
            "--pp 2 x --tp 2 x --dp-replicate 1 = 4 ranks does not divide the world of 6 ranks "
            "(pp x dp_replicate x dp_shard x tp); expected a world that is a multiple of 4");
}

}  // namespace
}  // namespace dtrain
