// Optimizers over flat slabs against torch::optim on separate tensors,
// clipGradNorm, and the learning-rate schedules.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numbers>

#include "common/error.h"
#include "dtrain/lr_schedule.h"
#include "dtrain/optim.h"
#include "tests/support/text.h"

namespace dtrain {

using testing::configErrorOf;
namespace {

using TensorMap = std::map<std::string, torch::Tensor>;

const std::vector<std::vector<int64_t>> kShapes = {{3, 4}, {5}, {2, 3, 2}};

// One slab with a param view (and grad view) per shape, like DataParallel's.
struct SlabModel {
  FlatSlab slab;
  std::vector<torch::Tensor> params;
  std::vector<torch::Tensor> grads;

  explicit SlabModel(torch::Dtype dtype = torch::kFloat, uint64_t seed = 1) {
    int64_t total = 0;
    for (const auto& shape : kShapes) total += c10::multiply_integers(shape);
    torch::manual_seed(seed);
    slab.param = torch::randn({total}, dtype);
    slab.grad = torch::zeros({total}, dtype);
    int64_t offset = 0;
    for (const auto& shape : kShapes) {
      const int64_t n = c10::multiply_integers(shape);
      params.push_back(slab.param.narrow(0, offset, n).view(shape));
      grads.push_back(slab.grad.narrow(0, offset, n).view(shape));
      offset += n;
    }
  }
};

// Random grads for step `step`, the same for every caller.
std::vector<torch::Tensor> gradsAt(int step, torch::Dtype dtype) {
  torch::manual_seed(1000 + step);
  std::vector<torch::Tensor> grads;
  for (const auto& shape : kShapes) grads.push_back(torch::randn(shape, dtype));
  return grads;
}

void setGrads(SlabModel& model, int step) {
  std::vector<torch::Tensor> grads = gradsAt(step, model.slab.param.scalar_type());
  for (size_t i = 0; i < grads.size(); ++i) model.grads[i].copy_(grads[i]);
}

// Runs `steps` steps of torch::optim (built by make_reference over separate
// tensors starting at the slab's values) and of `optimizer` on the slab, and
// returns the largest difference of any parameter.
double maxDiffAfter(int steps, SlabModel& model, Optimizer& optimizer,
                    const std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>&
                        make_reference) {
  std::vector<torch::Tensor> reference;
  for (const torch::Tensor& p : model.params) reference.push_back(p.detach().clone().requires_grad_(true));
  std::unique_ptr<torch::optim::Optimizer> torch_optimizer = make_reference(reference);
  for (int step = 0; step < steps; ++step) {
    std::vector<torch::Tensor> grads = gradsAt(step, model.slab.param.scalar_type());
    for (size_t i = 0; i < grads.size(); ++i) reference[i].mutable_grad() = grads[i].clone();
    torch_optimizer->step();
    setGrads(model, step);
    optimizer.step();
  }
  double diff = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    diff = std::max(diff, (model.params[i] - reference[i].detach()).abs().max().item<double>());
  }
  return diff;
}

TEST(SGDTest, MatchesTorchSGD) {
  const std::vector<SGDOptions> cases = {
      {.lr = 0.1},
      {.lr = 0.05, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.9, .nesterov = true},
      {.lr = 0.05, .momentum = 0.8, .dampening = 0.3},
      {.lr = 0.1, .weight_decay = 0.01},
      {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.05, .nesterov = true},
  };
  for (const SGDOptions& o : cases) {
    SCOPED_TRACE("momentum " + std::to_string(o.momentum) + " dampening " + std::to_string(o.dampening) +
                 " weight_decay " + std::to_string(o.weight_decay) + " nesterov " + std::to_string(o.nesterov));
    SlabModel model;
    auto optimizer = makeSGD({model.slab}, o);
    const torch::Tensor before = model.slab.param.clone();
    const double diff = maxDiffAfter(5, model, *optimizer, [&](std::vector<torch::Tensor> params) {
      return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(o.lr)
                                                             .momentum(o.momentum)
                                                             .dampening(o.dampening)
                                                             .weight_decay(o.weight_decay)
                                                             .nesterov(o.nesterov));
    });
    EXPECT_LT(diff, 1e-6);
    EXPECT_GT((model.slab.param - before).abs().max().item<double>(), 1e-3);  // it did move
    EXPECT_EQ(optimizer->name(), "sgd");
  }
}

TEST(AdamWTest, MatchesTorchAdamW) {
  for (torch::Dtype dtype : {torch::kFloat, torch::kDouble}) {
    SCOPED_TRACE(c10::toString(dtype));
    SlabModel model(dtype);
    const AdamWOptions o{.lr = 1e-2, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1};
    auto optimizer = makeAdamW({model.slab}, o);
    const double diff = maxDiffAfter(5, model, *optimizer, [&](std::vector<torch::Tensor> params) {
      return std::make_unique<torch::optim::AdamW>(
          params, torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
    });
    EXPECT_LT(diff, dtype == torch::kDouble ? 1e-12 : 1e-6);
    EXPECT_EQ(optimizer->name(), "adamw");
  }
}

TEST(OptimizerTest, ViewsIntoTheSlabSeeTheUpdate) {
  SlabModel model;
  const torch::Tensor first_before = model.params[0].clone();
  auto optimizer = makeSGD({model.slab}, {.lr = 0.5});
  setGrads(model, 0);
  const torch::Tensor grad0 = model.grads[0].clone();
  optimizer->step();
  EXPECT_TRUE(torch::allclose(model.params[0], first_before - 0.5 * grad0));
  EXPECT_EQ(model.params[0].data_ptr(), model.slab.param.data_ptr());  // still a view
}

TEST(OptimizerTest, ZeroGradZeroesInPlaceAndSetLrTakesEffect) {
  SlabModel model;
  auto optimizer = makeSGD({model.slab}, {.lr = 0.1});
  setGrads(model, 0);
  const void* grad_storage = model.slab.grad.data_ptr();
  optimizer->zeroGrad();
  EXPECT_TRUE(model.slab.grad.defined());
  EXPECT_EQ(model.slab.grad.data_ptr(), grad_storage);
  EXPECT_EQ(model.grads[1].abs().sum().item<double>(), 0.0);

  optimizer->setLr(0.25);
  EXPECT_EQ(optimizer->lr(), 0.25);
  model.slab.grad.fill_(1);
  const torch::Tensor before = model.slab.param.clone();
  optimizer->step();
  EXPECT_TRUE(torch::allclose(model.slab.param, before - 0.25));
  EXPECT_NE(configErrorOf([&] { optimizer->setLr(-1); }).find("lr"), std::string::npos);
}

// Saves after 3 steps, loads into a fresh optimizer over a copy of the slab,
// and runs both 2 more steps: they must stay identical.
void expectRoundTrip(const std::function<std::unique_ptr<Optimizer>(FlatSlab)>& make) {
  SlabModel a(torch::kFloat, 7);
  auto first = make(a.slab);
  for (int step = 0; step < 3; ++step) {
    setGrads(a, step);
    first->step();
  }
  TensorMap saved;
  for (auto& [key, tensor] : first->stateDict()) saved[key] = tensor.clone();

  SlabModel b(torch::kFloat, 99);
  b.slab.param.copy_(a.slab.param);
  auto second = make(b.slab);
  second->loadStateDict(saved);
  for (int step = 3; step < 5; ++step) {
    setGrads(a, step);
    setGrads(b, step);
    first->step();
    second->step();
  }
  EXPECT_TRUE(torch::equal(a.slab.param, b.slab.param));
  EXPECT_EQ(first->stateDict().at(first->name() + ".step").item<int64_t>(), 5);
  EXPECT_EQ(second->stateDict().at(second->name() + ".step").item<int64_t>(), 5);
}

TEST(OptimizerTest, StateDictRoundTrip) {
  {
    SCOPED_TRACE("sgd");
    expectRoundTrip([](FlatSlab s) { return makeSGD({s}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1}); });
  }
  {
    SCOPED_TRACE("adamw");
    expectRoundTrip([](FlatSlab s) { return makeAdamW({s}, {.lr = 1e-2}); });
  }
}

TEST(OptimizerTest, StateDictKeysAndLoadErrors) {
  SlabModel model;
  auto adamw = makeAdamW({model.slab}, {});
  TensorMap state = adamw->stateDict();
  std::vector<std::string> keys;
  for (const auto& item : state) keys.push_back(item.first);
  EXPECT_EQ(keys, (std::vector<std::string>{"adamw.exp_avg.0", "adamw.exp_avg_sq.0", "adamw.step"}));
  EXPECT_EQ(state.at("adamw.step").scalar_type(), torch::kLong);
  EXPECT_EQ(state.at("adamw.step").dim(), 0);

  TensorMap missing = state;
  missing.erase("adamw.exp_avg_sq.0");
  EXPECT_NE(configErrorOf([&] { adamw->loadStateDict(missing); }).find("missing key 'adamw.exp_avg_sq.0'"),
            std::string::npos);
  TensorMap wrong_shape = state;
  wrong_shape["adamw.exp_avg.0"] = torch::zeros({3});
  EXPECT_NE(configErrorOf([&] { adamw->loadStateDict(wrong_shape); }).find("'adamw.exp_avg.0' is [3]"),
            std::string::npos);
  TensorMap wrong_dtype = state;
  wrong_dtype["adamw.exp_avg.0"] = torch::zeros_like(model.slab.param, torch::kDouble);
  EXPECT_NE(configErrorOf([&] { adamw->loadStateDict(wrong_dtype); }).find("Double"), std::string::npos);

  auto sgd = makeSGD({model.slab}, {.momentum = 0.9});
  EXPECT_NE(configErrorOf([&] { sgd->loadStateDict(state); }).find("missing key 'sgd."), std::string::npos);
  auto plain = makeSGD({model.slab}, {});
  EXPECT_EQ(plain->stateDict().size(), 1u);  // just sgd.step
}

TEST(OptimizerTest, BadOptionsAndSlabsAreConfigErrors) {
  SlabModel model;
  const std::vector<FlatSlab> slabs = {model.slab};
  auto sgdError = [&](SGDOptions o) { return configErrorOf([&] { makeSGD(slabs, o); }); };
  auto adamwError = [&](AdamWOptions o) { return configErrorOf([&] { makeAdamW(slabs, o); }); };
  EXPECT_NE(sgdError({.lr = -0.1}).find("invalid lr -0.1"), std::string::npos);
  EXPECT_NE(sgdError({.momentum = -1}).find("invalid momentum"), std::string::npos);
  EXPECT_NE(sgdError({.weight_decay = -1}).find("invalid weight_decay"), std::string::npos);
  EXPECT_NE(sgdError({.nesterov = true}).find("nesterov"), std::string::npos);
  EXPECT_NE(sgdError({.momentum = 0.9, .dampening = 0.1, .nesterov = true}).find("dampening 0"), std::string::npos);
  EXPECT_NE(adamwError({.lr = std::nan("")}).find("invalid lr"), std::string::npos);
  EXPECT_NE(adamwError({.beta1 = 1.0}).find("invalid beta1 1"), std::string::npos);
  EXPECT_NE(adamwError({.beta2 = -0.1}).find("invalid beta2"), std::string::npos);
  EXPECT_NE(adamwError({.eps = 0}).find("invalid eps 0"), std::string::npos);
  EXPECT_NE(adamwError({.weight_decay = -0.5}).find("invalid weight_decay"), std::string::npos);

  FlatSlab ints{torch::zeros({4}, torch::kInt), torch::zeros({4}, torch::kInt)};
  EXPECT_NE(configErrorOf([&] { makeSGD({ints}, {}); }).find("slab 0 has dtype Int"), std::string::npos);
  FlatSlab mismatched{torch::zeros({4}), torch::zeros({5})};
  EXPECT_NE(configErrorOf([&] { makeAdamW({model.slab, mismatched}, {}); }).find("slab 1 grad"),
            std::string::npos);
  FlatSlab two_d{torch::zeros({2, 2}), torch::zeros({2, 2})};
  EXPECT_NE(configErrorOf([&] { makeSGD({two_d}, {}); }).find("1-D"), std::string::npos);
}

TEST(ClipGradNormTest, ScalesAboveMaxAndReturnsTheNormBefore) {
  FlatSlab a{torch::zeros({3}), torch::tensor({3.0f, 0.0f, 4.0f})};
  FlatSlab b{torch::zeros({2}, torch::kDouble), torch::tensor({12.0, 0.0}, torch::kDouble)};
  const double total = clipGradNorm({a, b}, 6.5);
  EXPECT_DOUBLE_EQ(total, 13.0);  // sqrt(9 + 16 + 144)
  const double coefficient = 6.5 / (13.0 + 1e-6);
  EXPECT_NEAR(a.grad[0].item<double>(), 3 * coefficient, 1e-6);
  EXPECT_NEAR(a.grad[2].item<double>(), 4 * coefficient, 1e-6);
  EXPECT_NEAR(b.grad[0].item<double>(), 12 * coefficient, 1e-12);
  EXPECT_NEAR(clipGradNorm({a, b}, 100), 6.5, 1e-5);
}

TEST(ClipGradNormTest, LeavesGradsBelowMaxAlone) {
  FlatSlab a{torch::zeros({2}), torch::tensor({0.3f, 0.4f})};
  const torch::Tensor before = a.grad.clone();
  EXPECT_NEAR(clipGradNorm({a}, 1.0), 0.5, 1e-7);
  EXPECT_TRUE(torch::equal(a.grad, before));
  EXPECT_NE(configErrorOf([&] { clipGradNorm({a}, 0); }).find("max_norm"), std::string::npos);
}

TEST(LrScheduleTest, WarmupIsLinear) {
  for (const char* kind : {"constant", "cosine", "step"}) {
    LrScheduleOptions o{.kind = kind, .base_lr = 0.4, .warmup_steps = 4, .total_steps = 10, .step_size = 3};
    EXPECT_DOUBLE_EQ(learningRateAt(o, 0), 0.1) << kind;
    EXPECT_DOUBLE_EQ(learningRateAt(o, 1), 0.2) << kind;
    EXPECT_DOUBLE_EQ(learningRateAt(o, 3), 0.4) << kind;
    EXPECT_DOUBLE_EQ(learningRateAt(o, 4), 0.4) << kind;  // first step after warmup: base_lr
  }
}

TEST(LrScheduleTest, CosineEndpointsAndMidpoint) {
  LrScheduleOptions o{.kind = "cosine", .base_lr = 1.0, .warmup_steps = 2, .total_steps = 12, .min_lr = 0.1};
  EXPECT_DOUBLE_EQ(learningRateAt(o, 2), 1.0);
  EXPECT_NEAR(learningRateAt(o, 7), 0.55, 1e-12);  // halfway: (base + min) / 2
  EXPECT_NEAR(learningRateAt(o, 4), 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.2)), 1e-12);
  EXPECT_NEAR(learningRateAt(o, 12), 0.1, 1e-12);
  EXPECT_NEAR(learningRateAt(o, 100), 0.1, 1e-12);  // clamped after total_steps
}

TEST(LrScheduleTest, StepDecayAndConstant) {
  LrScheduleOptions o{.kind = "step", .base_lr = 1.0, .warmup_steps = 1, .step_size = 3, .gamma = 0.5};
  EXPECT_DOUBLE_EQ(learningRateAt(o, 1), 1.0);
  EXPECT_DOUBLE_EQ(learningRateAt(o, 3), 1.0);
  EXPECT_DOUBLE_EQ(learningRateAt(o, 4), 0.5);
  EXPECT_DOUBLE_EQ(learningRateAt(o, 7), 0.25);
  LrScheduleOptions c{.kind = "constant", .base_lr = 0.3};
  EXPECT_DOUBLE_EQ(learningRateAt(c, 0), 0.3);
  EXPECT_DOUBLE_EQ(learningRateAt(c, 123456), 0.3);
}

TEST(LrScheduleTest, ValidationErrors) {
  auto error = [](LrScheduleOptions o) { return configErrorOf([&] { validate(o); }); };
  EXPECT_NE(error({.kind = "linear"}).find("unknown kind 'linear' (expected constant, cosine or step)"),
            std::string::npos);
  EXPECT_NE(error({.kind = "constant", .base_lr = -1}).find("base_lr"), std::string::npos);
  EXPECT_NE(error({.kind = "constant", .warmup_steps = -2}).find("warmup_steps"), std::string::npos);
  EXPECT_NE(error({.kind = "cosine", .warmup_steps = 5, .total_steps = 5}).find("total_steps > warmup_steps"),
            std::string::npos);
  EXPECT_NE(error({.kind = "step"}).find("step_size > 0"), std::string::npos);
  EXPECT_NE(error({.kind = "step", .step_size = 2, .gamma = -0.1}).find("gamma"), std::string::npos);
  EXPECT_NE(configErrorOf([] { learningRateAt({.kind = "constant"}, -1); }).find("step is -1"), std::string::npos);
  EXPECT_EQ(error({.kind = "cosine", .total_steps = 1}), "") << "accepted";
}

// Capturable mode (device-side lr and step count) follows the same
// trajectory as the host-scalar mode through lr changes, and counts steps
// only through countStep().
TEST(OptimizerTest, CapturableModeMatchesHostMode) {
  const std::vector<std::function<std::unique_ptr<Optimizer>(FlatSlab)>> makers = {
      [](FlatSlab s) { return makeSGD({s}, {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}); },
      [](FlatSlab s) { return makeSGD({s}, {.lr = 0.05}); },
      [](FlatSlab s) { return makeAdamW({s}, {.lr = 1e-2}); },
  };
  for (const auto& make : makers) {
    SlabModel host_model, device_model;
    auto host = make(host_model.slab);
    auto device = make(device_model.slab);
    for (int step = 0; step < 6; ++step) {
      const double lr = 0.01 * (step + 1);
      host->setLr(lr);
      device->setLr(lr);
      setGrads(host_model, step);
      setGrads(device_model, step);
      host->step();
      if (step == 0) {
        device->step();  // the first step on the host's say-so, then capturable
        device->setCapturable(true);
        EXPECT_TRUE(device->capturable());
      } else {
        device->step();
        device->countStep();
      }
    }
    EXPECT_EQ(device->stepCount(), host->stepCount()) << host->name();
    // AdamW's bias corrections are float32 on the device (as torch's
    // capturable AdamW) instead of double on the host: 1e-5 absolute.
    EXPECT_LT((device_model.slab.param - host_model.slab.param).abs().max().item<double>(), 1e-5) << host->name();
    const TensorMap host_state = host->stateDict(), device_state = device->stateDict();
    for (const auto& [key, tensor] : host_state) {
      EXPECT_LT((device_state.at(key).to(torch::kDouble) - tensor.to(torch::kDouble)).abs().max().item<double>(),
                1e-5)
          << host->name() << " " << key;
    }
  }
}

TEST(OptimizerTest, CapturableMomentumSgdNeedsAFirstStep) {
  SlabModel model;
  auto sgd = makeSGD({model.slab}, {.lr = 0.1, .momentum = 0.9});
  EXPECT_NE(configErrorOf([&] { sgd->setCapturable(true); }).find("needs one step taken first"), std::string::npos);
  EXPECT_FALSE(sgd->capturable());
}

// Same updates on a CUDA slab as on the CPU; skipped without a GPU.
TEST(OptimizerTest, CudaSlabsMatchCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::vector<std::function<std::unique_ptr<Optimizer>(FlatSlab)>> makers = {
      [](FlatSlab s) { return makeSGD({s}, {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}); },
      [](FlatSlab s) { return makeAdamW({s}, {.lr = 1e-2}); },
  };
  for (const auto& make : makers) {
    SlabModel cpu;
    FlatSlab cuda{cpu.slab.param.to(torch::kCUDA), cpu.slab.grad.to(torch::kCUDA)};
    auto on_cpu = make(cpu.slab);
    auto on_cuda = make(cuda);
    for (int step = 0; step < 5; ++step) {
      setGrads(cpu, step);
      cuda.grad.copy_(cpu.slab.grad);
      on_cpu->step();
      on_cuda->step();
    }
    EXPECT_LT((cuda.param.cpu() - cpu.slab.param).abs().max().item<double>(), 1e-5) << on_cpu->name();
    const double norm = clipGradNorm({cuda}, 0.5);
    EXPECT_NEAR(norm, cpu.slab.grad.norm().item<double>(), 1e-4);
    EXPECT_NEAR(cuda.grad.norm().item<double>(), 0.5, 1e-5);
  }
}

}  // namespace
}  // namespace dtrain
