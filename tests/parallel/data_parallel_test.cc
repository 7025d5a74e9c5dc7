// DataParallel: the flat-slab layout and bucket plan (one process), and the
// equivalence of N ranks x B with 1 rank x N*B (real processes under
// `dtrain launch`, Gloo on loopback).
#include <gtest/gtest.h>

#include <algorithm>

#include <cstdio>
#include <fstream>
#include <vector>

#include <torch/torch.h>

#include "tests/support/command.h"
#include "tests/support/ports.h"
#include "comm/communicator.h"
#include "common/error.h"
#include "dtrain/data_parallel.h"
#include "dtrain/optim.h"
#include "models/gradient_slot.h"
#include "store/hash_store.h"

namespace dtrain {
namespace {

using testing::freePort;
using testing::runCommand;

struct Net : torch::nn::Module {
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
  Net() {
    a = register_module("a", torch::nn::Linear(30, 300));   // 9,300 floats
    b = register_module("b", torch::nn::Linear(300, 100));  // 30,100 floats
    c = register_module("c", torch::nn::Linear(100, 3));
  }
  torch::Tensor forward(torch::Tensor x) { return c(torch::relu(b(torch::relu(a(x))))); }
};

std::shared_ptr<Communicator> soloComm() {
  return createCommunicator("gloo", std::make_shared<HashStore>(), 0, 1);
}

TEST(DataParallelTest, ParametersAndGradientsAreViewsIntoOneSlab) {
  auto net = std::make_shared<Net>();
  std::vector<torch::Tensor> before;
  for (auto& p : net->parameters()) before.push_back(p.detach().clone());
  DataParallel dp(net, soloComm());
  ASSERT_EQ(dp.slabs().size(), 1u);
  const auto& slab = dp.slabs()[0];
  const char* base = static_cast<const char*>(slab.param.data_ptr());
  const char* grad_base = static_cast<const char*>(slab.grad.data_ptr());
  auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::equal(params[i], before[i])) << "parameter " << i << " changed value when flattened";
    const char* p = static_cast<const char*>(params[i].data_ptr());
    EXPECT_GE(p, base);
    EXPECT_LT(p, base + slab.param.numel() * 4);
    EXPECT_EQ((p - base) % 16, 0) << "parameter " << i << " not 16-byte aligned";
    const char* g = static_cast<const char*>(params[i].grad().data_ptr());
    EXPECT_EQ(g - grad_base, p - base) << "grad of parameter " << i << " is not at its parameter's offset";
  }
  // The slab is in reverse registration order: c's params first.
  EXPECT_EQ(params.back().data_ptr(), slab.param.data_ptr());
  // Writing the slab writes the parameters.
  slab.param.fill_(0.5);
  EXPECT_TRUE(torch::all(params[0] == 0.5).item<bool>());
}

TEST(DataParallelTest, BucketsTileTheSlabInReverseOrderWithASmallFirstBucket) {
  auto net = std::make_shared<Net>();
  DataParallelOptions options;
  options.first_bucket_mb = 0.01;  // ~2,600 floats: c's weight and bias, b's bias
  options.bucket_mb = 0.05;        // ~13,000 floats: b's weight alone is larger and gets its own
  DataParallel dp(net, soloComm(), options);
  const auto& buckets = dp.buckets();
  ASSERT_GE(buckets.size(), 3u);
  int64_t next = 0;
  for (const Bucket& b : buckets) {
    EXPECT_EQ(b.offset, next) << "buckets must tile the slab without gaps";
    next = b.offset + b.numel;
  }
  EXPECT_EQ(next, dp.slabs()[0].param.numel());
  // c.bias, c.weight, b.bias (403 floats) come first; b.weight (30,000) would overflow it.
  EXPECT_EQ(buckets[0].params, (std::vector<int>{5, 4, 3}));
  EXPECT_EQ(buckets[1].params, (std::vector<int>{2}));
  EXPECT_LE(buckets[0].numel * 4, 16 + static_cast<int64_t>(0.01 * 1024 * 1024));
}

TEST(DataParallelTest, OneRankGradientsEqualPlainAutograd) {
  torch::manual_seed(3);
  auto reference = std::make_shared<Net>();
  torch::manual_seed(3);
  auto net = std::make_shared<Net>();
  DataParallelOptions options;
  options.bucket_mb = 0.02;
  options.first_bucket_mb = 0.005;
  DataParallel dp(net, soloComm(), options);
  torch::Tensor x = torch::randn({8, 30});
  for (int round = 0; round < 2; ++round) {  // grads accumulate until zeroGrad
    reference->forward(x).pow(2).mean().backward();
    net->forward(x).pow(2).mean().backward();
  }
  auto expected = reference->parameters();
  auto got = net->parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::allclose(got[i].grad(), expected[i].grad(), 1e-6, 1e-7)) << "parameter " << i;
  }
  EXPECT_EQ(dp.syncedBackwards(), 2);
  dp.zeroGrad();
  EXPECT_EQ(dp.slabs()[0].grad.abs().sum().item<float>(), 0.0f);
  {
    auto guard = dp.noSync();
    net->forward(x).sum().backward();
  }
  EXPECT_EQ(dp.syncedBackwards(), 2) << "noSync must not all-reduce";
}

// A net whose first layer runs twice, with a hook on one weight's
// gradient and a layer no forward uses: zeroGrad(/*set_to_none=*/true)
// and the first gradient written over the old ones give the bits that
// zeroing and adding give, across steps and noSync() accumulation.
struct Reused : torch::nn::Module {
  torch::nn::Linear a{nullptr}, b{nullptr}, unused{nullptr};
  Reused() {
    a = register_module("a", torch::nn::Linear(20, 20));
    b = register_module("b", torch::nn::Linear(20, 5));
    unused = register_module("unused", torch::nn::Linear(5, 5));
    b->weight.register_hook([](const torch::Tensor& g) { return g * 3; });
  }
  torch::Tensor forward(torch::Tensor x) { return b(torch::tanh(a(torch::tanh(a(x))))); }
};

// One rank on the CPU over Gloo, or where dtrain has no Gloo (the GPU
// machine's build, whose libtorch runs tensor hooks before the
// accumulator's pre-hooks) on the GPU over NCCL.
torch::Device soloDevice() {
#if DTRAIN_HAVE_GLOO
  return torch::kCPU;
#else
  return torch::Device(torch::kCUDA, 0);
#endif
}

std::shared_ptr<Communicator> soloCommOnDevice() {
  return createCommunicator(soloDevice().is_cuda() ? "nccl" : "gloo", std::make_shared<HashStore>(), 0, 1);
}

TEST(DataParallelTest, ZeroGradSetToNoneGivesTheBitsOfZeroingAndAdding) {
  const torch::Device device = soloDevice();
  for (const bool shard_gradients : {false, true}) {
    SCOPED_TRACE(shard_gradients ? "ZeRO-2" : "replicated");
    torch::manual_seed(5);
    auto eager_net = std::make_shared<Reused>();
    torch::manual_seed(5);
    auto lazy_net = std::make_shared<Reused>();
    eager_net->to(device);
    lazy_net->to(device);
    DataParallelOptions options;
    options.bucket_mb = 0.001;
    options.first_bucket_mb = 0.001;
    options.shard_gradients = shard_gradients;
    DataParallel eager(eager_net, soloCommOnDevice(), options), lazy(lazy_net, soloCommOnDevice(), options);
    const auto sgd = [&](DataParallel& dp) {
      const auto make = [](std::vector<FlatSlab> slabs) { return makeSGD(std::move(slabs), {.lr = 0.05}); };
      return shard_gradients ? makeShardedOptimizer(dp.shardLayout(), dp.communicator(), make, std::chrono::seconds(30))
                             : make(dp.slabs());
    };
    auto eager_sgd = sgd(eager), lazy_sgd = sgd(lazy);
    // What the optimizer reads: the gradient slab, or the shards.
    const auto held = [&](DataParallel& dp) {
      if (!shard_gradients) return dp.slabs()[0].grad;
      std::vector<torch::Tensor> parts;
      for (const FlatSlab& shard : dp.shards()) parts.push_back(shard.grad);
      return torch::cat(parts);
    };
    for (int step = 0; step < 3; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      eager.zeroGrad();
      lazy.zeroGrad(/*set_to_none=*/true);
      for (int micro = 0; micro < 2; ++micro) {
        const torch::Tensor x = torch::randn({6, 20}).to(device);
        if (micro == 0) {
          auto e = eager.noSync();
          auto l = lazy.noSync();
          eager_net->forward(x).pow(2).mean().backward();
          lazy_net->forward(x).pow(2).mean().backward();
        } else {
          eager_net->forward(x).pow(2).mean().backward();
          lazy_net->forward(x).pow(2).mean().backward();
        }
      }
      ASSERT_TRUE(torch::equal(held(lazy), held(eager)));
      EXPECT_GT(held(lazy).abs().sum().item<float>(), 0.0f);
      if (!shard_gradients) {
        EXPECT_EQ(lazy_net->unused->weight.grad().abs().sum().item<float>(), 0.0f)
            << "a parameter without a gradient kept last step's";
      }
      eager_sgd->step();
      lazy_sgd->step();
      // What the next step must write over: `unused` gets no gradient;
      // the shards are all written over.
      if (!shard_gradients) lazy_net->unused->weight.grad().fill_(7);
      for (const FlatSlab& shard : lazy.shards()) shard.grad.fill_(7);
    }
    EXPECT_EQ(lazy.syncedBackwards(), 3 * (shard_gradients ? 2 : 1));
  }
}

// A kernel that writes a weight's whole gradient itself (as the FP8
// linear layer does): y = x Wᵀ whose backward takes W's stale gradient
// and returns none for W. The bucket is still reduced and the gradient is
// the one plain autograd gives; without a stale slot it returns dW.
class WritesItsWeightGradient : public torch::autograd::Function<WritesItsWeightGradient> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["weight"] = w;
    return x.mm(w.t());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    torch::Tensor into = models::takeStaleGradient(ctx->saved_data["weight"].toTensor());
    ++calls;
    if (into.defined()) {
      ++direct;
      torch::mm_out(into, grads[0].t(), saved[0]);
      return {grads[0].mm(saved[1]), torch::Tensor()};
    }
    return {grads[0].mm(saved[1]), grads[0].t().mm(saved[0])};
  }
  static inline int calls = 0;
  static inline int direct = 0;
};

TEST(DataParallelTest, AKernelWritesAStaleGradientItselfAndTheBucketIsStillReduced) {
  const torch::Device device = soloDevice();
  for (const bool shard_gradients : {false, true}) {
    SCOPED_TRACE(shard_gradients ? "ZeRO-2: into the staging buffer" : "replicated: into the slab");
    torch::manual_seed(9);
    const torch::Tensor w0 = torch::randn({4, 8}).to(device);
    auto module = std::make_shared<torch::nn::Module>();
    torch::Tensor w = module->register_parameter("w", w0.clone());
    DataParallelOptions options;
    options.shard_gradients = shard_gradients;
    DataParallel dp(module, soloCommOnDevice(), options);
    const torch::Tensor x = torch::randn({5, 8}).to(device);
    const torch::Tensor reference = w0.clone().requires_grad_(true);
    torch::tanh(x.mm(reference.t())).sum().backward();
    const int calls = WritesItsWeightGradient::calls;
    for (const bool lazy : {true, true, false}) {
      dp.zeroGrad(lazy);
      const int direct = WritesItsWeightGradient::direct;
      torch::tanh(WritesItsWeightGradient::apply(x, w)).sum().backward();
      // Sharded, every backward's first gradient is written into the
      // staging buffer; replicated, only after zeroGrad(true).
      EXPECT_EQ(WritesItsWeightGradient::direct - direct, lazy || shard_gradients ? 1 : 0);
      const torch::Tensor got = shard_gradients ? dp.shards()[0].grad.narrow(0, 0, w.numel()).view({4, 8}) : w.grad();
      EXPECT_TRUE(torch::allclose(got, reference.grad(), 1e-6, 1e-7));
      if (shard_gradients) {
        EXPECT_FALSE(w.grad().defined());
        EXPECT_EQ(dp.shards()[0].grad.narrow(0, w.numel(), dp.shards()[0].grad.numel() - w.numel()).abs().sum()
                      .item<float>(), 0.0f) << "the bucket's padding was reduced with what its staging buffer held";
        dp.shards()[0].grad.fill_(7);  // written over after zeroGrad(true), zeroed after zeroGrad()
      }
    }
    EXPECT_EQ(WritesItsWeightGradient::calls - calls, 3);
    EXPECT_EQ(dp.syncedBackwards(), 3) << "a gradient written by the kernel did not reach its bucket";
    if (!shard_gradients) {
      EXPECT_EQ(w.grad().data_ptr(), dp.slabs()[0].grad.data_ptr()) << "the gradient left the slab";
      EXPECT_FALSE(models::takeStaleGradient(w).defined()) << "zeroed in place: nothing stale";
    }
  }
}

// GPT recipes leave norms, biases and embeddings undecayed: those parameters
// get slabs of their own, and AdamW's decay skips them.
TEST(DataParallelTest, NoWeightDecayParametersGetSlabsOfTheirOwnThatAdamWDoesNotDecay) {
  auto net = std::make_shared<Net>();
  std::vector<torch::Tensor> biases;
  for (const auto& item : net->named_parameters()) {
    if (item.key().find("bias") != std::string::npos) biases.push_back(item.value());
  }
  ASSERT_FALSE(biases.empty());
  DataParallelOptions options;
  options.no_weight_decay = biases;
  DataParallel dp(net, soloComm(), options);
  ASSERT_EQ(dp.slabs().size(), 2u);
  int64_t exempt_numel = 0;
  for (const auto& b : biases) exempt_numel += b.numel();
  const FlatSlab& exempt = dp.slabs()[0].weight_decay ? dp.slabs()[1] : dp.slabs()[0];
  EXPECT_FALSE(exempt.weight_decay);
  EXPECT_GE(exempt.param.numel(), exempt_numel);
  EXPECT_LT(exempt.param.numel(), exempt_numel + 4 * static_cast<int64_t>(biases.size()));  // 16-byte padding

  std::vector<torch::Tensor> before;
  for (const auto& p : net->parameters()) before.push_back(p.detach().clone());
  auto adamw = makeAdamW(dp.slabs(), {.lr = 0.1, .weight_decay = 0.5});
  dp.zeroGrad();
  adamw->step();  // zero gradients: only the decay moves anything
  const auto after = net->parameters();
  for (size_t i = 0; i < after.size(); ++i) {
    const bool is_bias = std::any_of(biases.begin(), biases.end(), [&](const torch::Tensor& b) {
      return b.unsafeGetTensorImpl() == after[i].unsafeGetTensorImpl();
    });
    if (is_bias) {
      EXPECT_TRUE(torch::equal(after[i], before[i])) << "bias " << i << " was decayed";
    } else {
      EXPECT_TRUE(torch::allclose(after[i], before[i] * (1 - 0.1 * 0.5))) << "weight " << i << " was not decayed";
    }
  }
}

// Frozen parameters (a LoRA run's base) are none of DataParallel's: in no
// slab or bucket, without a gradient or optimizer state, left as they are
// by a step; replicated and with sharded gradients (ZeRO-2) alike.
TEST(DataParallelTest, FrozenParametersStayOutOfSlabsBucketsGradientsAndTheOptimizer) {
  for (const bool shard_gradients : {false, true}) {
    SCOPED_TRACE(shard_gradients ? "ZeRO-2" : "replicated");
    torch::manual_seed(3);
    auto net = std::make_shared<Net>();
    net->b->weight.requires_grad_(false);
    net->b->bias.requires_grad_(false);
    const torch::Tensor frozen = net->b->weight, before = frozen.detach().clone();
    const void* frozen_storage = frozen.data_ptr();
    DataParallelOptions options;
    options.shard_gradients = shard_gradients;
    DataParallel dp(net, soloComm(), options);
    ASSERT_EQ(dp.parameters().size(), 4u);  // a and c
    int64_t trainable = 0;
    for (const torch::Tensor& p : dp.parameters()) {
      EXPECT_TRUE(p.requires_grad());
      trainable += p.numel();
    }
    EXPECT_EQ(trainable, 30 * 300 + 300 + 100 * 3 + 3);
    int64_t bucketed = 0;
    for (const Bucket& b : dp.buckets()) bucketed += b.numel;
    EXPECT_LT(bucketed, trainable + 1024) << "the frozen layer's 30,100 elements are in a bucket";
    EXPECT_EQ(frozen.data_ptr(), frozen_storage) << "the frozen weight moved into a slab";
    const auto make = [](std::vector<FlatSlab> slabs) { return makeAdamW(std::move(slabs), {.lr = 0.1}); };
    auto adamw = shard_gradients
                     ? makeShardedOptimizer(dp.shardLayout(), dp.communicator(), make, std::chrono::seconds(30))
                     : make(dp.slabs());
    EXPECT_LT(adamw->stateBytes(), 8 * (trainable + 1024));
    const torch::Tensor a_before = net->a->weight.detach().clone();
    dp.zeroGrad();
    net->forward(torch::randn({8, 30})).pow(2).mean().backward();
    adamw->step();
    EXPECT_FALSE(net->b->weight.grad().defined());
    EXPECT_FALSE(net->b->bias.grad().defined());
    EXPECT_TRUE(torch::equal(frozen, before));
    EXPECT_FALSE(torch::equal(net->a->weight, a_before)) << "the trainable layer did not move";
  }
}

TEST(DataParallelTest, BadInputIsAConfigError) {
  auto empty = std::make_shared<torch::nn::Module>();
  try {
    DataParallel dp(empty, soloComm());
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no trainable parameters"), std::string::npos) << e.what();
  }
  DataParallelOptions options;
  options.bucket_mb = 0;
  EXPECT_THROW(DataParallel(std::make_shared<Net>(), soloComm(), options), ConfigError);
}

// --- N ranks x B == 1 rank x N*B, real processes --------------------------

std::string workerBin() { return std::string(DTRAIN_TEST_BIN_DIR) + "/train_equivalence_worker"; }

std::vector<float> readFloats(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::vector<float> values;
  float v;
  while (file.read(reinterpret_cast<char*>(&v), sizeof(v))) values.push_back(v);
  return values;
}

std::vector<float> runWorker(int ranks, const std::string& args, const std::string& tag) {
  const std::string out = ::testing::TempDir() + "equivalence_" + tag + "_" + std::to_string(ranks) + ".bin";
  std::remove(out.c_str());
  std::string command;
  if (ranks == 1) {
    command = "env -u RANK -u WORLD_SIZE " + workerBin() + " " + args + " --out " + out;
  } else {
    command = testing::dtrainBin() + " launch --nproc-per-node " + std::to_string(ranks) + " --master-port " +
              std::to_string(freePort()) + " " + workerBin() + " " + args + " --out " + out;
  }
  auto r = runCommand(command, 120);
  EXPECT_EQ(r.exit_code, 0) << command << "\n" << r.output;
  return readFloats(out);
}

// Relative L2 distance: the sums of N partial gradients and of one whole
// batch round differently, so equality is to float32 rounding, not bits.
double relativeDistance(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

struct EquivalenceCase {
  const char* name;
  const char* args;
  int ranks;
  // Arguments of the N-rank run only (the reference stays one replicated rank).
  const char* multi_args = "";
};

class EquivalenceTest : public ::testing::TestWithParam<EquivalenceCase> {};

TEST_P(EquivalenceTest, NRanksTimesBEqualsOneRankTimesNB) {
  const EquivalenceCase& c = GetParam();
  const std::string args = std::string("--steps 6 --global-batch 24 ") + c.args;
  std::vector<float> single = runWorker(1, args, c.name);
  std::vector<float> multi = runWorker(c.ranks, args + " " + c.multi_args, c.name);
  ASSERT_FALSE(single.empty());
  ASSERT_EQ(single.size(), multi.size());
  const double distance = relativeDistance(multi, single);
  EXPECT_LT(distance, 1e-5) << c.name;
  // And training moved the parameters: the comparison is not vacuous.
  // (Its own file name: ctest runs the cases in parallel processes.)
  std::vector<float> untrained =
      runWorker(1, std::string("--steps 0 --global-batch 24 ") + c.args, std::string(c.name) + "_untrained");
  ASSERT_EQ(untrained.size(), single.size());
  EXPECT_GT(relativeDistance(untrained, single), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, EquivalenceTest,
    ::testing::Values(EquivalenceCase{"sgd_one_bucket", "--optimizer sgd --bucket-mb 25", 2},
                      EquivalenceCase{"sgd_many_buckets", "--optimizer sgd --bucket-mb 0.004", 2},
                      EquivalenceCase{"nesterov_three_ranks", "--optimizer nesterov --bucket-mb 0.01", 3},
                      EquivalenceCase{"adamw_many_buckets", "--optimizer adamw --bucket-mb 0.004", 2},
                      EquivalenceCase{"adamw_three_ranks", "--optimizer adamw --bucket-mb 1", 3},
                      EquivalenceCase{"torch_adamw_param_groups", "--optimizer torch-adamw-groups --bucket-mb 0.004", 2},
                      EquivalenceCase{"sgd_accumulation", "--optimizer sgd --bucket-mb 0.004 --accum 2", 2},
                      EquivalenceCase{"adamw_accumulation", "--optimizer adamw --bucket-mb 0.01 --accum 4", 3},
                      EquivalenceCase{"gpt2_adamw", "--model gpt2 --optimizer adamw --bucket-mb 0.01", 2},
                      EquivalenceCase{"gpt2_adamw_accumulation",
                                      "--model gpt2 --optimizer adamw --bucket-mb 0.004 --accum 2", 3},
                      EquivalenceCase{"llama_sgd_three_ranks", "--model llama --optimizer sgd --bucket-mb 0.01", 3},
                      // ZeRO-2: gradients reduce-scattered into 1/N shards, the optimizer over the shards
                      // (the MLP's unused layer: a bucket that gets no gradient).
                      EquivalenceCase{"zero2_sgd_many_buckets", "--optimizer sgd --bucket-mb 0.004", 2,
                                      "--shard gradients"},
                      EquivalenceCase{"zero2_nesterov_three_ranks_clipped", "--optimizer nesterov --bucket-mb 0.01 "
                                      "--clip 0.5", 3, "--shard gradients"},
                      EquivalenceCase{"zero2_adamw_accumulation", "--optimizer adamw --bucket-mb 0.01 --accum 4", 3,
                                      "--shard gradients"},
                      EquivalenceCase{"zero2_gpt2_adamw_accumulation_clipped",
                                      "--model gpt2 --optimizer adamw --bucket-mb 0.004 --accum 2 --clip 0.5", 3,
                                      "--shard gradients"},
                      EquivalenceCase{"zero2_llama_sgd", "--model llama --optimizer sgd --bucket-mb 0.01", 2,
                                      "--shard gradients"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dtrain
