// The linear layers' products under bf16 autocast as dtrain's own autograd
// function (fused_ops_cuda.h's linear): the same outputs and gradients as
// libtorch's linear, the weight's gradient written in fp32 straight into a
// stale gradient slot (models/gradient_slot.h); and grouped-query attention
// without widening the key/value heads (DTRAIN_NATIVE_GQA). Skipped without
// a CUDA device or in a build without the fused kernels.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "common/settings.h"
#include "fused_test_util.h"
#include "libtorch/compat.h"
#include "models/gradient_slot.h"
#include "models/transformer_ops.h"

// Its own namespace: the unity build puts this file beside fused_ops_test.cc.
namespace dtrain::models::testing::products {
namespace {

constexpr double kBf16 = 2e-2;

torch::Tensor cuda(torch::IntArrayRef sizes, torch::ScalarType dtype, double scale = 1) {
  return (torch::randn(sizes, torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA)) * scale).to(dtype);
}

// An environment variable set for the scope (restored after), the settings
// read from it forgotten both times.
class ScopedSetting {
 public:
  ScopedSetting(const char* env, const char* value) : env_(env) {
    if (const char* v = std::getenv(env)) previous_ = v;
    setenv(env, value, 1);
    forget();
  }
  ~ScopedSetting() {
    if (previous_) {
      setenv(env_, previous_->c_str(), 1);
    } else {
      unsetenv(env_);
    }
    forget();
  }
  ScopedSetting(const ScopedSetting&) = delete;
  ScopedSetting& operator=(const ScopedSetting&) = delete;

 private:
  void forget() const {
    for (const SettingBase* setting : allSettings()) {
      if (setting->env() == env_) setting->reset();
    }
  }
  const char* env_;
  std::optional<std::string> previous_;
};

// A gradient slot as DataParallel's lazy zeroGrad leaves one: stale until
// taken once, then written by whoever took it.
class TestSlot : public GradientSlot {
 public:
  explicit TestSlot(const torch::Tensor& param)
      : param_(param), buffer_(torch::full_like(param, 7.0, param.options().requires_grad(false))) {
    registerGradientSlot(param_, this);
  }
  ~TestSlot() override { unregisterGradientSlot(param_, this); }
  torch::Tensor takeStale() override {
    ++takes_;
    if (!stale_) return {};
    stale_ = false;
    return buffer_;
  }
  const torch::Tensor& buffer() const { return buffer_; }
  int takes() const { return takes_; }

 private:
  torch::Tensor param_;
  torch::Tensor buffer_;
  bool stale_ = true;
  int takes_ = 0;
};

class FusedProductsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DTRAIN_SKIP_WITHOUT_FUSED_KERNELS();
    torch::manual_seed(7);
  }
};

// fp32 master weights under autocast, 3-D input with a bias (the epilogue's)
// and 2-D without: output, d(x), d(W) and d(bias) as libtorch's linear.
TEST_F(FusedProductsTest, LinearUnderAutocastMatchesLibtorch) {
  const auto x = cuda({3, 37, 96}, torch::kFloat), w = cuda({160, 96}, torch::kFloat, 0.1);
  const auto b = cuda({160}, torch::kFloat, 0.5);
  expectSameAsLibtorch([](const auto& in) { return std::vector{ops::linear(in[0], in[1], in[2])}; }, {x, w, b},
                       kBf16, kBf16, /*autocast=*/true);
  const auto x2 = cuda({64, 96}, torch::kBFloat16);
  expectSameAsLibtorch([](const auto& in) { return std::vector{ops::linear(in[0], in[1], torch::Tensor())}; },
                       {x2, w}, kBf16, kBf16, /*autocast=*/true);
}

// The weight's gradient goes into the stale slot, in fp32, and none is left
// for autograd to add; once the slot is no longer stale, the gradient comes
// back as usual (and adds up with what is there).
TEST_F(FusedProductsTest, WeightGradientIsWrittenIntoAStaleSlot) {
  FusedKernelsSwitch on(true);
  const auto x = cuda({4, 33, 64}, torch::kBFloat16);
  const auto w = cuda({128, 64}, torch::kFloat, 0.1).requires_grad_(true);
  const auto probe = cuda({4, 33, 128}, torch::kFloat);
  // The reference: dW = probeᵀ x in fp32 over the same bf16 inputs.
  const torch::Tensor expected =
      torch::mm(probe.to(torch::kBFloat16).to(torch::kFloat).reshape({-1, 128}).t(),
                x.to(torch::kFloat).reshape({-1, 64}));
  TestSlot slot(w);
  {
    Bf16Autocast autocast;
    const torch::Tensor y = ops::linear(x, w, torch::Tensor());
    (y.to(torch::kFloat) * probe).sum().backward();
  }
  EXPECT_EQ(slot.takes(), 1);
  EXPECT_FALSE(w.grad().defined()) << "the gradient was written into the slot: nothing left to accumulate";
  EXPECT_EQ(slot.buffer().scalar_type(), torch::kFloat);
  EXPECT_TRUE(allClose(slot.buffer(), expected, 1e-3)) << "written in fp32 by the product, not rounded to bf16";
  {
    Bf16Autocast autocast;
    const torch::Tensor y = ops::linear(x, w, torch::Tensor());
    (y.to(torch::kFloat) * probe).sum().backward();
  }
  EXPECT_EQ(slot.takes(), 2);
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().scalar_type(), torch::kFloat);
  EXPECT_TRUE(allClose(w.grad(), expected, 1e-3));
}

// A weight that needs no gradient (LoRA's frozen base) gets none, and its
// slot is left alone.
TEST_F(FusedProductsTest, AFrozenWeightGetsNoGradient) {
  FusedKernelsSwitch on(true);
  const auto x = cuda({40, 64}, torch::kBFloat16).requires_grad_(true);
  const auto w = cuda({32, 64}, torch::kFloat, 0.1);
  TestSlot slot(w);
  {
    Bf16Autocast autocast;
    ops::linear(x, w, torch::Tensor()).to(torch::kFloat).sum().backward();
  }
  EXPECT_EQ(slot.takes(), 0);
  ASSERT_TRUE(x.grad().defined());
  const torch::Tensor expected = torch::ones({40, 32}, torch::kCUDA).mm(w.to(torch::kBFloat16).to(torch::kFloat));
  EXPECT_TRUE(allClose(x.grad().to(torch::kFloat), expected, kBf16));
}

// Llama's q, k, v (and gate, up) over one input: outputs and every gradient
// as separate linears give, d(x) made inside the products.
TEST_F(FusedProductsTest, SharedInputLinearsMatchSeparateLinears) {
  const auto x = cuda({3, 37, 96}, torch::kFloat), wq = cuda({160, 96}, torch::kFloat, 0.1);
  const auto wk = cuda({32, 96}, torch::kFloat, 0.1), wv = cuda({32, 96}, torch::kFloat, 0.1);
  expectSameAsLibtorch([](const auto& in) { return ops::sharedInputLinears(in[0], {in[1], in[2], in[3]}); },
                       {x, wq, wk, wv}, kBf16, kBf16, /*autocast=*/true);
  expectSameAsLibtorch([](const auto& in) { return ops::sharedInputLinears(in[0], {in[1], in[2]}); },
                       {x, wq, wk}, kBf16, kBf16, /*autocast=*/true);
}

// An output that reaches no loss leaves its weight without a gradient, and
// d(x) comes from the others alone.
TEST_F(FusedProductsTest, SharedInputLinearsWithAnUnusedOutput) {
  FusedKernelsSwitch on(true);
  const auto x = cuda({64, 96}, torch::kBFloat16).requires_grad_(true);
  const auto w0 = cuda({48, 96}, torch::kFloat, 0.1).requires_grad_(true);
  const auto w1 = cuda({16, 96}, torch::kFloat, 0.1).requires_grad_(true);
  {
    Bf16Autocast autocast;
    const std::vector<torch::Tensor> outs = ops::sharedInputLinears(x, {w0, w1});
    ASSERT_EQ(outs.size(), 2u);
    EXPECT_TRUE(reachesFused(outs[0]));
    outs[0].to(torch::kFloat).sum().backward();
  }
  EXPECT_TRUE(w0.grad().defined());
  EXPECT_FALSE(w1.grad().defined());
  const torch::Tensor expected = torch::ones({64, 48}, torch::kCUDA).mm(w0.detach().to(torch::kBFloat16).to(torch::kFloat));
  EXPECT_TRUE(allClose(x.grad().to(torch::kFloat), expected, kBf16));
}

// With DTRAIN_FUSED_PRODUCTS=0 the product is libtorch's linear again.
TEST_F(FusedProductsTest, SettingOffRunsLibtorchsLinear) {
  FusedKernelsSwitch on(true);
  ScopedSetting off("DTRAIN_FUSED_PRODUCTS", "0");
  const auto x = cuda({40, 64}, torch::kBFloat16);
  const auto w = cuda({32, 64}, torch::kFloat, 0.1).requires_grad_(true);
  Bf16Autocast autocast;
  EXPECT_FALSE(reachesFused(ops::linear(x, w, torch::Tensor())));
}

// Llama's grouped queries (8 query heads over 2 key/value heads): SDPA's
// enable_gqa against the widened keys and values, output and gradients.
TEST_F(FusedProductsTest, GroupedQueryAttentionWithoutWideningMatchesWidening) {
  if (!compat::kHasNativeGqa) GTEST_SKIP() << "SDPA's enable_gqa needs libtorch 2.5 or newer";
  const auto q = cuda({2, 8, 65, 64}, torch::kBFloat16), k = cuda({2, 2, 65, 64}, torch::kBFloat16);
  const auto v = cuda({2, 2, 65, 64}, torch::kBFloat16), probe = cuda({2, 8, 65, 64}, torch::kFloat);
  auto run = [&](const char* native) {
    ScopedSetting setting("DTRAIN_NATIVE_GQA", native);
    std::vector<torch::Tensor> leaves{q.clone().requires_grad_(true), k.clone().requires_grad_(true),
                                      v.clone().requires_grad_(true)};
    const torch::Tensor y = ops::causalAttention(leaves[0], leaves[1], leaves[2]);
    (y.to(torch::kFloat) * probe).sum().backward();
    return std::vector{y, leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
  };
  const std::vector<torch::Tensor> widened = run("0"), native = run("1");
  const char* names[] = {"output", "d(q)", "d(k)", "d(v)"};
  for (size_t i = 0; i < widened.size(); ++i) {
    SCOPED_TRACE(names[i]);
    EXPECT_EQ(native[i].sizes(), widened[i].sizes());
    EXPECT_TRUE(allClose(native[i].to(torch::kFloat), widened[i].to(torch::kFloat), kBf16));
  }
}

}  // namespace
}  // namespace dtrain::models::testing::products
