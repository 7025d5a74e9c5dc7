// Precision names, the autocast scope and the GradScaler on the CPU.
#include <gtest/gtest.h>

#include <limits>

#include "common/error.h"
#include "dtrain/amp.h"
#include "libtorch/compat.h"
#include "tests/support/text.h"

namespace dtrain {

using testing::configErrorOf;
namespace {

TEST(PrecisionTest, ParsesNamesAndAliases) {
  EXPECT_EQ(parsePrecision("fp32"), Precision::kFp32);
  EXPECT_EQ(parsePrecision("float32"), Precision::kFp32);
  EXPECT_EQ(parsePrecision("bf16"), Precision::kBf16);
  EXPECT_EQ(parsePrecision("BFloat16"), Precision::kBf16);
  EXPECT_EQ(parsePrecision("fp16"), Precision::kFp16);
  EXPECT_EQ(parsePrecision("float16"), Precision::kFp16);
  EXPECT_EQ(parsePrecision("FP8"), Precision::kFp8);
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16, Precision::kFp8}) {
    EXPECT_EQ(parsePrecision(precisionName(p)), p);
  }
  EXPECT_NE(configErrorOf([] { parsePrecision("fp4"); })
                .find("'fp4' is not known (expected fp32, bf16, fp16 or fp8"),
            std::string::npos);
}

// fp8 on a device that cannot run it: the reason, at the scope's start.
TEST(AutocastGuardTest, Fp8WhereItCannotRunSaysWhy) {
  const std::string why = configErrorOf([] { AutocastGuard fp8(torch::kCPU, Precision::kFp8); });
  EXPECT_EQ(why.rfind("precision fp8: FP8 products need", 0), 0u) << why;
  EXPECT_NE(why.find("; use bf16"), std::string::npos) << why;
  EXPECT_FALSE(compat::isAutocastEnabled(c10::DeviceType::CPU)) << "nothing left enabled";
}

TEST(AutocastGuardTest, CpuBf16CastsInsideAndRestoresOutside) {
  const torch::Tensor a = torch::randn({4, 3});
  const torch::Tensor b = torch::randn({3, 2});
  ASSERT_FALSE(compat::isAutocastEnabled(c10::DeviceType::CPU));
  const at::ScalarType dtype_before = compat::autocastDtype(c10::DeviceType::CPU);
  {
    AutocastGuard autocast(torch::kCPU, Precision::kBf16);
    EXPECT_TRUE(compat::isAutocastEnabled(c10::DeviceType::CPU));
    EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kBFloat16);
    {
      AutocastGuard fp32(torch::kCPU, Precision::kFp32);  // a no-op: stays bf16
      EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kBFloat16);
    }
    EXPECT_TRUE(compat::isAutocastEnabled(c10::DeviceType::CPU));  // inner scope restored "enabled"
  }
  EXPECT_FALSE(compat::isAutocastEnabled(c10::DeviceType::CPU));
  EXPECT_EQ(compat::autocastDtype(c10::DeviceType::CPU), dtype_before);
  EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat);
}

// The CUDA flags are thread-local state too, so this runs without a GPU;
// libtorch 1.13's CPU autocast refuses any dtype but bf16.
TEST(AutocastGuardTest, CudaScopeRestoresThePreviousDtypeAndFlag) {
  const c10::DeviceType cuda = c10::DeviceType::CUDA;
  ASSERT_FALSE(compat::isAutocastEnabled(cuda));
  ASSERT_EQ(compat::autocastDtype(cuda), at::kHalf);  // the default
  {
    AutocastGuard autocast(torch::Device(torch::kCUDA), Precision::kBf16);
    EXPECT_TRUE(compat::isAutocastEnabled(cuda));
    EXPECT_EQ(compat::autocastDtype(cuda), at::kBFloat16);
    EXPECT_FALSE(compat::isAutocastEnabled(c10::DeviceType::CPU));
  }
  EXPECT_FALSE(compat::isAutocastEnabled(cuda));
  EXPECT_EQ(compat::autocastDtype(cuda), at::kHalf);
}

TEST(AutocastGuardTest, RejectsWhatItCannotDo) {
  EXPECT_NE(configErrorOf([] { AutocastGuard g(torch::Device(torch::kMeta), Precision::kBf16); })
                .find("is not supported (expected cpu or cuda)"),
            std::string::npos);
  if constexpr (!compat::kCpuAutocastSupportsFp16) {
    EXPECT_NE(configErrorOf([] { AutocastGuard g(torch::kCPU, Precision::kFp16); }).find("fp16 on the CPU"),
              std::string::npos);
    EXPECT_FALSE(compat::isAutocastEnabled(c10::DeviceType::CPU));
  } else {
    AutocastGuard autocast(torch::kCPU, Precision::kFp16);
    EXPECT_EQ(torch::mm(torch::ones({2, 2}), torch::ones({2, 2})).scalar_type(), torch::kHalf);
  }
}

TEST(AutocastGuardTest, CudaCastsMatmuls) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Tensor a = torch::randn({8, 8}, torch::kCUDA);
  for (auto [precision, dtype] :
       {std::pair{Precision::kFp16, torch::kHalf}, std::pair{Precision::kBf16, torch::kBFloat16}}) {
    AutocastGuard autocast(torch::kCUDA, precision);
    EXPECT_EQ(torch::mm(a, a).scalar_type(), dtype);
  }
  EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kFloat);
}

// One float32 slab of 4 params with SGD(lr 1) over it.
struct ScaledModel {
  FlatSlab slab{torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}), torch::zeros({4})};
  std::unique_ptr<Optimizer> optimizer = makeSGD({slab}, {.lr = 1.0});
};

TEST(GradScalerTest, ScalesTheLossAndUnscalesTheGrads) {
  GradScaler scaler({.init_scale = 1024});
  const torch::Tensor loss = torch::tensor(0.5f);
  EXPECT_FLOAT_EQ(scaler.scale(loss).item<float>(), 512.0f);
  EXPECT_EQ(scaler.currentScale(), 1024.0);

  ScaledModel model;
  model.slab.grad.copy_(torch::tensor({1024.0f, -2048.0f, 512.0f, 0.0f}));
  EXPECT_TRUE(scaler.unscale({model.slab}));
  EXPECT_TRUE(torch::equal(model.slab.grad, torch::tensor({1.0f, -2.0f, 0.5f, 0.0f})));
  EXPECT_TRUE(scaler.unscale({model.slab}));  // once per update: nothing divided again
  EXPECT_TRUE(torch::equal(model.slab.grad, torch::tensor({1.0f, -2.0f, 0.5f, 0.0f})));
  EXPECT_TRUE(scaler.step(*model.optimizer));  // uses the unscaled grads
  EXPECT_TRUE(torch::equal(model.slab.param, torch::tensor({0.0f, 4.0f, 2.5f, 4.0f})));
}

TEST(GradScalerTest, InfOrNanSkipsTheStepAndBacksOff) {
  const float bad_values[] = {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (float bad : bad_values) {
    GradScaler scaler({.init_scale = 256, .growth_interval = 2});
    ScaledModel model;
    model.slab.grad.fill_(256);
    EXPECT_TRUE(scaler.step(*model.optimizer));  // one finite step: growth tracker at 1
    const torch::Tensor before = model.slab.param.clone();
    model.slab.grad.fill_(1);
    model.slab.grad[2] = bad;
    EXPECT_FALSE(scaler.step(*model.optimizer));
    EXPECT_TRUE(torch::equal(model.slab.param, before));
    EXPECT_EQ(scaler.currentScale(), 128.0);
    EXPECT_EQ(scaler.stateDict().at("scaler.growth_tracker").item<int64_t>(), 0);
  }
}

TEST(GradScalerTest, GrowsAfterGrowthIntervalFiniteSteps) {
  GradScaler scaler({.init_scale = 8, .growth_factor = 4, .growth_interval = 3});
  ScaledModel model;
  for (int step = 1; step <= 3; ++step) {
    model.slab.grad.fill_(1);
    EXPECT_TRUE(scaler.step(*model.optimizer));
    EXPECT_EQ(scaler.currentScale(), step < 3 ? 8.0 : 32.0) << "after step " << step;
  }
  EXPECT_EQ(scaler.stateDict().at("scaler.growth_tracker").item<int64_t>(), 0);
}

TEST(GradScalerTest, StateDictRoundTrip) {
  GradScaler first({.init_scale = 64, .growth_interval = 3});
  ScaledModel model;
  for (int step = 0; step < 2; ++step) {
    model.slab.grad.fill_(1);
    first.step(*model.optimizer);
  }
  model.slab.grad.fill_(std::numeric_limits<float>::infinity());
  first.step(*model.optimizer);  // scale 32, tracker 0
  model.slab.grad.fill_(1);
  first.step(*model.optimizer);  // tracker 1
  const auto state = first.stateDict();
  EXPECT_EQ(state.at("scaler.scale").scalar_type(), torch::kFloat);
  EXPECT_EQ(state.at("scaler.growth_tracker").scalar_type(), torch::kLong);

  GradScaler second({.growth_interval = 3});
  second.loadStateDict(state);
  EXPECT_EQ(second.currentScale(), 32.0);
  for (GradScaler* scaler : {&first, &second}) {
    for (int step = 0; step < 2; ++step) {
      model.slab.grad.fill_(1);
      scaler->step(*model.optimizer);
    }
  }
  EXPECT_EQ(first.currentScale(), 64.0);
  EXPECT_EQ(second.currentScale(), 64.0);

  EXPECT_NE(configErrorOf([&] { second.loadStateDict({}); }).find("missing key 'scaler.scale'"), std::string::npos);
  auto bad = state;
  bad["scaler.scale"] = torch::tensor(-1.0f);
  EXPECT_NE(configErrorOf([&] { second.loadStateDict(bad); }).find("'scaler.scale' is -1"), std::string::npos);
}

TEST(GradScalerTest, DisabledPassesThrough) {
  GradScaler scaler({.enabled = false});
  const torch::Tensor loss = torch::tensor(3.0f);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  EXPECT_EQ(scaler.currentScale(), 1.0);
  EXPECT_TRUE(scaler.stateDict().empty());
  ScaledModel model;
  model.slab.grad.fill_(std::numeric_limits<float>::infinity());
  EXPECT_TRUE(scaler.unscale({model.slab}));
  model.slab.grad.fill_(1);
  EXPECT_TRUE(scaler.step(*model.optimizer));
  EXPECT_TRUE(torch::equal(model.slab.param, torch::tensor({0.0f, 1.0f, 2.0f, 3.0f})));
}

TEST(GradScalerTest, MisuseIsAConfigError) {
  GradScaler scaler;
  EXPECT_NE(configErrorOf([&] { scaler.update(); }).find("no inf/nan check"), std::string::npos);
  EXPECT_NE(configErrorOf([] { GradScaler s({.backoff_factor = 1.5}); }).find("backoff_factor 1.5"),
            std::string::npos);
  EXPECT_NE(configErrorOf([] { GradScaler s({.growth_factor = 1}); }).find("growth_factor 1"), std::string::npos);
  EXPECT_NE(configErrorOf([] { GradScaler s({.growth_interval = 0}); }).find("growth_interval 0"), std::string::npos);
}

// The CUDA path (the fused _amp_* kernels); skipped without a GPU.
TEST(GradScalerTest, CudaSkipsBacksOffAndGrows) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  GradScaler scaler({.init_scale = 256, .growth_interval = 2});
  FlatSlab slab{torch::ones({1000}, torch::kCUDA), torch::zeros({1000}, torch::kCUDA)};
  auto optimizer = makeSGD({slab}, {.lr = 1.0});
  EXPECT_EQ(scaler.scale(torch::tensor(2.0f, torch::kCUDA)).item<float>(), 512.0f);

  slab.grad.fill_(512);
  EXPECT_TRUE(scaler.step(*optimizer));
  EXPECT_EQ(slab.param.max().item<float>(), -1.0f);  // 1 - 512 / 256
  slab.grad.fill_(1);
  slab.grad[999] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(scaler.step(*optimizer));
  EXPECT_EQ(slab.param.max().item<float>(), -1.0f);
  EXPECT_EQ(scaler.currentScale(), 128.0);
  for (int step = 0; step < 2; ++step) {
    slab.grad.fill_(0);
    EXPECT_TRUE(scaler.step(*optimizer));
  }
  EXPECT_EQ(scaler.currentScale(), 256.0);
  const auto state = scaler.stateDict();
  EXPECT_TRUE(state.at("scaler.scale").device().is_cpu());
  GradScaler restored;
  restored.loadStateDict(state);
  EXPECT_EQ(restored.currentScale(), 256.0);
}

}  // namespace
}  // namespace dtrain
