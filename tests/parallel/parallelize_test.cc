// parallelize(): each ShardStage of a ParallelPlan composes its pieces
// over an unchanged tiny GPT-2 (ranks as threads over Gloo on an in-memory
// store): which gradient synchronisation, parameter sharding and optimizer
// layout it picked, that every stage trains to where the replicated one
// does, and the plans it refuses. The stages' own behaviour is tested in
// zero3_test, data_parallel_test and grad_sync_test.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "comm/communicator.h"
#include "common/error.h"
#include "models/language_model.h"
#include "parallel/parallelize.h"
#include "store/hash_store.h"
#include "tests/comm/rank_threads.h"

namespace dtrain {
namespace {

std::shared_ptr<models::LanguageModel> tinyGpt2(int layers = 2) {
  models::LanguageModelOverrides o;
  o.layers = layers;
  o.dim = 32;
  o.heads = 4;
  o.seq_len = 16;
  o.vocab_size = 96;
  torch::manual_seed(3);
  return models::createLanguageModel(models::namedLanguageModel("gpt2", o));
}

ParallelPlan planOf(ShardStage stage, int world) {
  ParallelOptions options;
  options.shard = stage;
  options.bucket_mb = 0.01;
  return planParallelism(options, world);
}

ParallelizeOptions adamw() {
  ParallelizeOptions options;
  options.timeout = std::chrono::seconds(60);
  options.make_optimizer = [](std::vector<FlatSlab> slabs) {
    return makeAdamW(std::move(slabs), {.lr = 3e-3, .weight_decay = 0.1});
  };
  return options;
}

struct StageResult {
  std::vector<torch::Tensor> params;  // after training, rank 0's
  int64_t state_bytes = 0;            // rank 0's optimizer state
};

// Three steps of `stage` on 2 ranks; checks the pieces parallelize chose.
StageResult trainStage(ShardStage stage) {
  const int world = 2;
  std::vector<std::shared_ptr<models::LanguageModel>> models;
  for (int r = 0; r < world; ++r) models.push_back(tinyGpt2());
  torch::manual_seed(9);
  std::vector<torch::Tensor> tokens;
  for (int r = 0; r < world * 3; ++r) tokens.push_back(torch::randint(96, {2, 16}, torch::kLong));
  auto store = std::make_shared<HashStore>();
  StageResult result;
  const auto errors = testing::runOnRankThreads(world, [&](int rank) {
    const auto& model = models[static_cast<size_t>(rank)];
    std::shared_ptr<Communicator> comm = createCommunicator("gloo", store, rank, world);
    {
      ParallelModel parallel = parallelize(model, planOf(stage, world), comm, adamw());
      DataParallel& dp = *parallel.data_parallel;
      const bool sharded_gradients = stage == ShardStage::kGradients || stage == ShardStage::kFull;
      EXPECT_EQ(dp.shardsGradients(), sharded_gradients) << "ReduceScatterBuckets for ZeRO-2 and ZeRO-3";
      EXPECT_EQ(dp.shardsParameters(), stage == ShardStage::kFull) << "ShardedParameters for ZeRO-3 only";
      EXPECT_EQ(parallel.optimizer->name(), "adamw") << "what checkpoints record, whatever the layout";
      EXPECT_EQ(dp.shards().empty(), !sharded_gradients);
      for (size_t s = 0; s < dp.slabs().size(); ++s) {
        if (stage == ShardStage::kOptimizer) {
          EXPECT_EQ(dp.paddedSlabNumel(s) % (64 * world), 0) << "ShardedSlabs' padding";
        }
        if (stage == ShardStage::kNone) {
          EXPECT_EQ(dp.paddedSlabNumel(s), dp.slabNumel(s));
        }
        EXPECT_EQ(dp.slabs()[s].grad.defined(), !sharded_gradients);
      }
      // The model's hooks: ZeRO-3's gathers, else the start of backward at the loss.
      ASSERT_NE(model->unitHooks(), nullptr);
      if (stage == ShardStage::kFull) {
        EXPECT_EQ(model->unitHooks(), dp.unitHooks());
      }
      for (int step = 0; step < 3; ++step) {
        parallel.optimizer->zeroGrad();
        const torch::Tensor& batch = tokens[static_cast<size_t>(step * world + rank)];
        model->loss(batch, batch).backward();
        parallel.optimizer->step();
      }
      EXPECT_EQ(dp.syncedBackwards(), 3);
      std::vector<torch::Tensor> params;
      for (const torch::Tensor& p : dp.fullParameters()) params.push_back(p.detach().clone());
      if (rank == 0) {
        result.params = params;
        result.state_bytes = parallel.optimizer->stateBytes();
      }
    }
    EXPECT_EQ(model->unitHooks(), nullptr) << "the hooks leave with the DataParallel";
  });
  for (const auto& e : errors) EXPECT_EQ(testing::errorText(e), "");
  return result;
}

TEST(ParallelizeTest, EachStageComposesItsPiecesAndTrainsWhereTheReplicatedOneDoes) {
  const StageResult replicated = trainStage(ShardStage::kNone);
  for (ShardStage stage : {ShardStage::kOptimizer, ShardStage::kGradients, ShardStage::kFull}) {
    SCOPED_TRACE(shardStageName(stage));
    const StageResult sharded = trainStage(stage);
    EXPECT_LT(static_cast<double>(sharded.state_bytes), 0.6 * static_cast<double>(replicated.state_bytes))
        << "a sharded optimizer layout keeps about 1/2 of the state on 2 ranks";
    ASSERT_EQ(sharded.params.size(), replicated.params.size());
    for (size_t i = 0; i < replicated.params.size(); ++i) {
      EXPECT_TRUE(torch::allclose(sharded.params[i], replicated.params[i], 1e-4, 1e-6)) << "parameter " << i;
    }
  }
}

TEST(ParallelizeTest, OptimizerLayoutsPadAsTheirStageNeeds) {
  EXPECT_EQ(optimizerLayoutFor(ShardStage::kNone)->slabMultiple(4), 1);
  EXPECT_EQ(optimizerLayoutFor(ShardStage::kOptimizer)->slabMultiple(4), 256);
  EXPECT_EQ(optimizerLayoutFor(ShardStage::kGradients)->slabMultiple(4), 1) << "the buckets are padded instead";
  EXPECT_EQ(optimizerLayoutFor(ShardStage::kFull)->slabMultiple(4), 1);
}

TEST(ParallelizeTest, PlansItCannotApplyAreConfigErrors) {
  std::shared_ptr<Communicator> solo = createCommunicator("gloo", std::make_shared<HashStore>(), 0, 1);
  const auto model = tinyGpt2();
  EXPECT_THROW(parallelize(model, planOf(ShardStage::kNone, 2), solo, adamw()), ConfigError)
      << "a plan for 2 ranks over a group of 1";
  // Hybrid sharding: the stage shards over the dp_shard group, which `comm` must be.
  ParallelPlan hybrid = planOf(ShardStage::kOptimizer, 1);
  hybrid.dp_replicate = 2;
  hybrid.dp_shard = 2;
  try {
    parallelize(model, hybrid, solo, adamw());
    ADD_FAILURE() << "a dp_shard group of 2 over a communicator of 1";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.message().find("the plan's dp_shard group is 2 ranks, the communicator has 1"), std::string::npos)
        << e.message();
  }
  EXPECT_THROW(parallelize(model, planOf(ShardStage::kNone, 1), solo, ParallelizeOptions{}), ConfigError)
      << "no optimizer factory";
  EXPECT_THROW(parallelize(nullptr, planOf(ShardStage::kNone, 1), solo, adamw()), ConfigError);
  EXPECT_EQ(model->unitHooks(), nullptr);
}

// ZeRO-3 under a pipeline (plan.pp > 1) keeps every unit gathered through
// the step, each in a slot of its own, where without one the blocks take
// turns in two slots; both train to the same parameters.
TEST(ParallelizeTest, PipelineStagesKeepEachUnitInASlotOfItsOwn) {
  std::shared_ptr<Communicator> solo = createCommunicator("gloo", std::make_shared<HashStore>(), 0, 1);
  torch::manual_seed(9);
  const torch::Tensor tokens = torch::randint(96, {2, 16}, torch::kLong);
  std::vector<std::vector<torch::Tensor>> trained;
  for (int pp : {1, 2}) {
    SCOPED_TRACE("pp " + std::to_string(pp));
    const auto model = tinyGpt2(3);
    ParallelPlan plan = planOf(ShardStage::kFull, 1);
    plan.pp = pp;
    ParallelModel parallel = parallelize(model, plan, solo, adamw());
    const auto storage = [&model](int block) {
      return model->blocks()[static_cast<size_t>(block)]->parameters()[0].storage().unsafeGetStorageImpl();
    };
    EXPECT_NE(storage(0), storage(1));
    EXPECT_EQ(storage(0) == storage(2), pp == 1) << "blocks 0 and 2 share a slot only without a pipeline";
    for (int step = 0; step < 2; ++step) {
      parallel.optimizer->zeroGrad();
      model->loss(tokens, tokens).backward();
      parallel.optimizer->step();
    }
    trained.emplace_back();
    for (const torch::Tensor& p : parallel.data_parallel->fullParameters()) trained.back().push_back(p.clone());
  }
  ASSERT_EQ(trained[0].size(), trained[1].size());
  for (size_t i = 0; i < trained[0].size(); ++i) EXPECT_TRUE(torch::equal(trained[0][i], trained[1][i])) << i;
}

}  // namespace
}  // namespace dtrain
