// ZeRO-3 (DataParallel's shard_parameters) in one process, ranks standing
// in as threads over Gloo on an in-memory store: tiny GPT-2 and Llama
// models trained with sharded parameters end where replicated
// DataParallel does (bitwise on 2 ranks in float32, where the arithmetic
// is the same; within rounding on 3), each rank holds 1/N of the
// parameters, the parameters are views into gather slots, and what the
// model calls between units is checked. `dtrain train --shard full` runs
// end to end in tests/train/shard_full_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "comm/communicator.h"
#include "common/error.h"
#include "dtrain/amp.h"
#include "dtrain/data_parallel.h"
#include "dtrain/optim.h"
#include "models/language_model.h"
#include "models/transformer_ops.h"
#include "store/hash_store.h"
#include "tests/comm/rank_threads.h"

namespace dtrain {
namespace {

models::LanguageModelConfig tinyConfig(const std::string& family, int64_t layers = 3) {
  models::LanguageModelOverrides o;
  o.layers = layers;
  o.dim = 32;
  o.heads = 4;
  if (family == "llama") o.kv_heads = 2;
  o.seq_len = 16;
  o.vocab_size = 96;
  return models::namedLanguageModel(family, o);
}

// Batches of every rank and step, drawn before any thread starts (torch's
// default generator is shared by all threads).
struct Batches {
  std::vector<std::vector<torch::Tensor>> tokens, targets;  // [rank][step]
};
Batches makeBatches(int world, int steps, int64_t vocab, int64_t seq) {
  Batches b;
  torch::manual_seed(11);
  b.tokens.resize(static_cast<size_t>(world));
  b.targets.resize(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    for (int s = 0; s < steps; ++s) {
      b.tokens[static_cast<size_t>(r)].push_back(torch::randint(vocab, {2, seq}, torch::kLong));
      b.targets[static_cast<size_t>(r)].push_back(torch::randint(vocab, {2, seq}, torch::kLong));
    }
  }
  return b;
}

struct RankResult {
  std::vector<torch::Tensor> initial;  // the parameters before training
  std::vector<torch::Tensor> params;  // fullParameters() at the end, cloned
  std::vector<double> losses;
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t state_bytes = 0;
};

struct RunSpec {
  std::string family = "gpt2";
  int64_t layers = 3;
  int world = 2;
  int steps = 4;
  bool zero3 = true;
  Precision precision = Precision::kFp32;
  torch::ScalarType reduce_dtype = torch::kFloat;
  double clip = 0;  // 0: none
  bool checkpointing = false;  // activation checkpointing
  bool sgd = false;            // SGD with momentum instead of AdamW
  int micro_batches = 1;       // gradient accumulation
};

// One training run of `spec`, every rank a thread; rank r's results.
std::vector<RankResult> train(const RunSpec& spec) {
  const models::LanguageModelConfig config = tinyConfig(spec.family, spec.layers);
  std::vector<std::shared_ptr<models::LanguageModel>> models;
  for (int r = 0; r < spec.world; ++r) {
    torch::manual_seed(5);  // every rank builds the same model (construction broadcasts rank 0's anyway)
    models.push_back(models::createLanguageModel(config));
    models.back()->setActivationCheckpointing(spec.checkpointing);
  }
  const Batches batches = makeBatches(spec.world, spec.steps, config.vocab_size, config.seq_len);
  auto store = std::make_shared<HashStore>();
  std::vector<RankResult> results(static_cast<size_t>(spec.world));
  const auto errors = testing::runOnRankThreads(spec.world, [&](int rank) {
    CommunicatorOptions comm_options;
    comm_options.store_prefix = "main";
    std::shared_ptr<Communicator> comm = createCommunicator("gloo", store, rank, spec.world, comm_options);
    comm_options.store_prefix = "gather";
    std::shared_ptr<Communicator> gather = createCommunicator("gloo", store, rank, spec.world, comm_options);
    auto model = models[static_cast<size_t>(rank)];
    RankResult& out = results[static_cast<size_t>(rank)];
    for (const torch::Tensor& p : model->parameters()) out.initial.push_back(p.detach().clone());
    DataParallelOptions options;
    options.model = model.get();  // its units and unit hooks
    options.no_weight_decay = model->noWeightDecayParameters();
    options.bucket_mb = 0.01;
    options.first_bucket_mb = 0.01;
    if (spec.zero3) {
      options.shard_parameters = true;
      options.param_dtype = spec.precision == Precision::kBf16 ? torch::kBFloat16 : torch::kFloat;
      options.reduce_dtype = spec.reduce_dtype;
      options.gather_communicator = gather;
    }
    DataParallel dp(model, comm, options);
    AdamWOptions adamw;
    adamw.lr = 3e-3;
    adamw.weight_decay = 0.1;
    const auto make = [&adamw](std::vector<FlatSlab> slabs) { return makeAdamW(std::move(slabs), adamw); };
    SGDOptions sgd;
    sgd.lr = 0.05;
    sgd.momentum = 0.9;
    sgd.weight_decay = 1e-4;
    const auto make_sgd = [&sgd](std::vector<FlatSlab> slabs) { return makeSGD(std::move(slabs), sgd); };
    std::unique_ptr<Optimizer> optimizer;
    if (spec.zero3) {
      optimizer = spec.sgd ? makeShardedOptimizer(dp.shardLayout(), comm, make_sgd, std::chrono::seconds(60))
                           : makeShardedOptimizer(dp.shardLayout(), comm, make, std::chrono::seconds(60));
    } else {
      optimizer = spec.sgd ? makeSGD(dp.slabs(), sgd) : makeAdamW(dp.slabs(), adamw);
    }
    for (int step = 0; step < spec.steps; ++step) {
      optimizer->zeroGrad();
      const torch::Tensor& tokens = batches.tokens[static_cast<size_t>(rank)][static_cast<size_t>(step)];
      const torch::Tensor& targets = batches.targets[static_cast<size_t>(rank)][static_cast<size_t>(step)];
      torch::Tensor loss = torch::zeros({});
      for (int m = 0; m < spec.micro_batches; ++m) {
        // Rows m, m + k, ...: k equal micro-batches of the batch.
        const torch::Tensor rows = torch::arange(m, tokens.size(0), spec.micro_batches);
        torch::Tensor part;
        {
          AutocastGuard autocast(torch::kCPU, spec.precision);
          part = model->loss(tokens.index_select(0, rows), targets.index_select(0, rows)) / spec.micro_batches;
        }
        if (m + 1 < spec.micro_batches) {
          auto no_sync = dp.noSync();  // ZeRO-3 reduces every micro-batch anyway
          part.backward();
        } else {
          part.backward();
        }
        loss = loss + part.detach();
      }
      if (spec.clip > 0) {
        if (spec.zero3) {
          clipGradNorm(dp.shards(), spec.clip, *comm, std::chrono::seconds(60));
        } else {
          clipGradNorm(dp.slabs(), spec.clip);
        }
      }
      optimizer->step();
      out.losses.push_back(loss.item<double>());
    }
    for (const torch::Tensor& p : dp.fullParameters()) out.params.push_back(p.detach().to(torch::kFloat).clone());
    out.parameter_bytes = dp.parameterBytes();
    out.gradient_bytes = dp.gradientBytes();
    out.state_bytes = optimizer->stateBytes();
  });
  for (int r = 0; r < spec.world; ++r) {
    EXPECT_EQ(testing::errorText(errors[static_cast<size_t>(r)]), "") << "rank " << r;
  }
  return results;
}

// The largest |a - b| over max |b|, over every parameter.
double worstRelative(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max(b[i].abs().max().item<double>(), 1e-12);
    worst = std::max(worst, (a[i].to(torch::kDouble) - b[i].to(torch::kDouble)).abs().max().item<double>() / scale);
  }
  return worst;
}

// ||a - b|| / ||b - start|| over all parameters: how far a landed from b,
// against how far b travelled.
double relativeToTravel(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                        const std::vector<torch::Tensor>& start) {
  double apart = 0, travelled = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    apart += (a[i].to(torch::kDouble) - b[i].to(torch::kDouble)).pow(2).sum().item<double>();
    travelled += (b[i].to(torch::kDouble) - start[i].to(torch::kDouble)).pow(2).sum().item<double>();
  }
  return std::sqrt(apart / std::max(travelled, 1e-30));
}

void expectBitwise(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i << " differs by up to "
                                          << (a[i] - b[i]).abs().max().item<double>();
  }
}

// The run of `spec` replicated, then with ZeRO-3.
struct RunPair {
  std::vector<RankResult> replicated, sharded;
};
RunPair replicatedAndSharded(RunSpec spec) {
  RunPair pair;
  spec.zero3 = false;
  pair.replicated = train(spec);
  spec.zero3 = true;
  pair.sharded = train(spec);
  return pair;
}

// Two ranks sum two numbers, the same in either order, and AdamW is
// elementwise: ZeRO-3 ends with replicated training's bits, on every rank.
TEST(Zero3Test, TwoRanksEqualReplicatedBitwiseGpt2AndLlama) {
  for (const std::string family : {"gpt2", "llama"}) {
    SCOPED_TRACE(family);
    RunSpec spec;
    spec.family = family;
    const auto [replicated, sharded] = replicatedAndSharded(spec);
    ASSERT_EQ(sharded.size(), 2u);
    expectBitwise(sharded[0].params, replicated[0].params);
    expectBitwise(sharded[1].params, replicated[0].params);
    for (size_t s = 0; s < sharded[0].losses.size(); ++s) EXPECT_EQ(sharded[0].losses[s], replicated[0].losses[s]);
    // Training moved the parameters (not a run that changed nothing).
    EXPECT_GT(relativeToTravel(sharded[0].initial, sharded[0].params, sharded[0].initial), 0.5);
  }
}

// Three ranks: Gloo's ring sums in another order than the replicated
// all-reduce's segments (buckets are laid out differently), so the last
// bits part; clipping by the global norm of the shards works the same.
TEST(Zero3Test, ThreeRanksWithClippingMatchReplicatedWithinRounding) {
  RunSpec spec;
  spec.world = 3;
  spec.clip = 0.5;
  const auto [replicated, sharded] = replicatedAndSharded(spec);
  const double worst = worstRelative(sharded[2].params, replicated[0].params);
  EXPECT_LT(worst, 1e-3) << "AdamW turns last-bit gradient noise into lr-sized steps (see shard_test.cc)";
  expectBitwise(sharded[0].params, sharded[2].params);
  std::printf("ZeRO-3 on 3 ranks vs replicated: largest difference / magnitude %.3g\n", worst);
}

// Activation checkpointing recomputes each block in backward with the same
// operations on the same values: training ends with the same bits, with
// replicated parameters and with ZeRO-3 (whose gathered block is there when
// its recomputation runs).
TEST(Zero3Test, ActivationCheckpointingChangesNoBit) {
  for (const std::string family : {"gpt2", "llama"}) {
    SCOPED_TRACE(family);
    RunSpec spec;
    spec.family = family;
    spec.zero3 = false;
    const auto plain = train(spec);
    spec.checkpointing = true;
    const auto [replicated, sharded] = replicatedAndSharded(spec);
    expectBitwise(replicated[0].params, plain[0].params);
    expectBitwise(sharded[1].params, plain[0].params);
  }
}

struct NormCounter : models::ops::OpObserver {
  int norms = 0;
  void opStarted(models::ops::OpKind kind, const torch::Tensor&) override {
    if (kind == models::ops::OpKind::kNorm) ++norms;
  }
  void opEnded(models::ops::OpKind, const torch::Tensor&) override {}
};

// With checkpointing each block's forward runs again in backward (its two
// norms twice), and the forward keeps nothing of the block's inside: the
// loss's graph holds one node per block instead of the block's operations.
TEST(Zero3Test, ActivationCheckpointingRecomputesEachBlockInBackward) {
  torch::manual_seed(3);
  auto model = models::createLanguageModel(tinyConfig("gpt2", 3));
  const torch::Tensor tokens = torch::randint(96, {2, 16}, torch::kLong);
  for (bool checkpointing : {false, true}) {
    model->setActivationCheckpointing(checkpointing);
    NormCounter counter;
    models::ops::setOpObserver(&counter);
    model->loss(tokens, tokens).backward();
    models::ops::setOpObserver(nullptr);
    // 3 blocks x 2 norms + the final norm, and the blocks' again when recomputed.
    EXPECT_EQ(counter.norms, checkpointing ? 13 : 7) << "checkpointing " << checkpointing;
  }
}

// SGD with momentum and two micro-batches a step: ZeRO-3 reduces each
// micro-batch's gradients and adds their averages in the shard, replicated
// training adds locally and reduces the sum; on 2 ranks the two orders of
// a few float32 additions differ in the last bits only.
TEST(Zero3Test, SgdWithGradientAccumulationMatchesReplicated) {
  RunSpec spec;
  spec.sgd = true;
  spec.micro_batches = 2;
  const auto [replicated, sharded] = replicatedAndSharded(spec);
  const double apart = relativeToTravel(sharded[0].params, replicated[0].params, replicated[0].initial);
  EXPECT_LT(apart, 1e-5);
  std::printf("ZeRO-3 SGD with accumulation vs replicated: %.3g of the travel apart\n", apart);
}

// Memory from the tensors each rank holds: parameters (master shard plus
// the gather slots: the root and two blocks), gradients (shard plus two
// staging buffers of a block) and AdamW state shrink with the ranks. Eight
// blocks of a tiny Llama (no position table), so the blocks dominate.
TEST(Zero3Test, EachRankHoldsItsShareOfParametersGradientsAndState) {
  RunSpec spec;
  spec.family = "llama";
  spec.layers = 8;
  spec.steps = 1;
  spec.zero3 = false;
  const RankResult whole = train(spec)[0];
  spec.zero3 = true;
  const RankResult half = train(spec)[0];
  spec.world = 3;
  const RankResult third = train(spec)[0];
  EXPECT_LT(half.state_bytes, whole.state_bytes * 0.55);
  EXPECT_LT(third.state_bytes, whole.state_bytes * 0.37);
  EXPECT_LT(half.gradient_bytes, whole.gradient_bytes);
  EXPECT_LT(third.gradient_bytes, half.gradient_bytes);
  EXPECT_LT(half.parameter_bytes, whole.parameter_bytes);
  EXPECT_LT(third.parameter_bytes, half.parameter_bytes);
  std::printf("parameter bytes per rank: %lld replicated, %lld on 2 ranks, %lld on 3\n",
              static_cast<long long>(whole.parameter_bytes), static_cast<long long>(half.parameter_bytes),
              static_cast<long long>(third.parameter_bytes));
}

// bf16 compute parameters (CPU autocast) with fp32 or bf16 reductions:
// training follows the float32 replicated run within bf16's precision.
TEST(Zero3Test, Bf16ParametersFollowTheFloat32Run) {
  RunSpec spec;
  spec.steps = 6;
  spec.zero3 = false;
  const auto reference = train(spec)[0];
  spec.zero3 = true;
  spec.precision = Precision::kBf16;
  for (torch::ScalarType reduce : {torch::kFloat, torch::kBFloat16}) {
    spec.reduce_dtype = reduce;
    const auto bf16 = train(spec)[0];
    for (size_t s = 0; s < bf16.losses.size(); ++s) {
      EXPECT_NEAR(bf16.losses[s], reference.losses[s], 0.03 * reference.losses[s]) << "step " << s;
    }
    // Where bf16 training lands against how far fp32 training went.
    const double apart = relativeToTravel(bf16.params, reference.params, reference.initial);
    EXPECT_LT(apart, 0.25);
    std::printf("bf16 parameters, %s reductions: %.3g of the fp32 run's travel apart\n",
                reduce == torch::kFloat ? "fp32" : "bf16", apart);
  }
}

// fp16 with sharded gradients: a rank whose shard holds an inf makes every
// rank skip the step and back off (the flag is all-reduced before it is read).
TEST(Zero3Test, ShardedLossScalerSkipsOnEveryRankWhenOneShardOverflows) {
  auto store = std::make_shared<HashStore>();
  std::vector<int> finite(2, -1);
  std::vector<double> scales(2, 0);
  const auto errors = testing::runOnRankThreads(2, [&](int rank) {
    std::shared_ptr<Communicator> comm = createCommunicator("gloo", store, rank, 2);
    GradScaler scaler;
    scaler.setFoundInfReduction([comm](torch::Tensor& flag) {
      AllreduceOptions options;
      options.op = ReduceOp::kMax;
      Buffer buffer{flag.data_ptr(), 1, DType::kFloat32, Device::cpu(), nullptr};
      comm->allreduce(buffer, buffer, options)->wait(std::chrono::seconds(30));
    });
    FlatSlab shard{torch::ones({8}), torch::full({8}, 65536.0f), true};
    if (rank == 1) shard.grad[3] = std::numeric_limits<float>::infinity();
    finite[static_cast<size_t>(rank)] = scaler.unscale({shard}) ? 1 : 0;
    scaler.update();
    scales[static_cast<size_t>(rank)] = scaler.currentScale();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(testing::errorText(errors[static_cast<size_t>(r)]), "") << "rank " << r;
    EXPECT_EQ(finite[static_cast<size_t>(r)], 0) << "rank " << r << " must skip the step too";
    EXPECT_EQ(scales[static_cast<size_t>(r)], 32768.0) << "rank " << r << " backs off";
  }
}

struct Probe : models::UnitHooks {
  std::vector<std::string> calls;
  void beforeForward(int unit) override { calls.push_back("f" + std::to_string(unit)); }
  std::vector<torch::Tensor> afterForward(int unit, std::vector<torch::Tensor> outputs) override {
    calls.push_back("a" + std::to_string(unit));
    return outputs;
  }
};

// The model calls its hooks around every unit, the root first, and lists
// each trainable parameter in exactly one unit.
TEST(Zero3Test, LanguageModelsCallTheirUnitHooksInOrder) {
  torch::manual_seed(1);
  auto model = models::createLanguageModel(tinyConfig("llama", 2));
  const auto units = model->shardingUnits();
  ASSERT_EQ(units.size(), 3u);
  size_t listed = 0;
  for (const auto& unit : units) listed += unit.size();
  EXPECT_EQ(listed, model->parameters().size());
  Probe probe;
  model->setUnitHooks(&probe);
  const torch::Tensor tokens = torch::zeros({1, 4}, torch::kLong);
  model->loss(tokens, tokens);
  EXPECT_EQ(probe.calls, (std::vector<std::string>{"f0", "f1", "a1", "f2", "a2", "a0"}));
  model->setUnitHooks(nullptr);
}

TEST(Zero3Test, ParametersAreViewsIntoTheGatherSlotsAndBadSetupsAreConfigErrors) {
  torch::manual_seed(1);
  auto model = models::createLanguageModel(tinyConfig("gpt2"));
  std::shared_ptr<Communicator> comm = createCommunicator("gloo", std::make_shared<HashStore>(), 0, 1);
  DataParallelOptions options;
  options.shard_parameters = true;
  options.param_dtype = torch::kBFloat16;
  options.model = model.get();
  {
    DataParallel dp(model, comm, options);
    EXPECT_TRUE(dp.shardsGradients());
    EXPECT_EQ(model->unitHooks(), dp.unitHooks());
    for (const torch::Tensor& p : model->parameters()) EXPECT_EQ(p.scalar_type(), torch::kBFloat16);
    EXPECT_FALSE(dp.slabs().front().param.defined());
    // Blocks 1 and 3 share a slot: their first parameters alias.
    const auto& blocks = model->blocks();
    EXPECT_EQ(blocks[0]->parameters()[0].data_ptr(), blocks[2]->parameters()[0].data_ptr());
    EXPECT_NE(blocks[0]->parameters()[0].data_ptr(), blocks[1]->parameters()[0].data_ptr());
  }
  EXPECT_EQ(model->unitHooks(), nullptr) << "the hooks leave with the DataParallel";

  // A module that is no models::Model and names no units.
  auto linear = std::make_shared<torch::nn::LinearImpl>(4, 4);
  options.model = nullptr;
  try {
    DataParallel dp(linear, comm, options);
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("units"), std::string::npos) << e.what();
  }
  // A parameter in no unit.
  DataParallelOptions partial = options;
  partial.units = {{linear->weight}};
  EXPECT_THROW(DataParallel(linear, comm, partial), ConfigError);
  // bf16 parameters or reductions without sharding.
  DataParallelOptions unsharded;
  unsharded.param_dtype = torch::kBFloat16;
  EXPECT_THROW(DataParallel(std::make_shared<torch::nn::LinearImpl>(4, 4), comm, unsharded), ConfigError);
  unsharded.param_dtype = torch::kFloat;
  unsharded.reduce_dtype = torch::kBFloat16;
  EXPECT_THROW(DataParallel(std::make_shared<torch::nn::LinearImpl>(4, 4), comm, unsharded), ConfigError);
}

}  // namespace
}  // namespace dtrain
