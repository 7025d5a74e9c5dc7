// FP8 products (models/fp8_linear.h): the scale from an absolute maximum,
// the scope, and why FP8 cannot run here, on any machine; on a GPU of
// compute capability 8.9 or newer with libtorch 2.5+, the product and its
// gradients against float32 ones (each recipe), zeros, saturation and NaN,
// the fused casts against libtorch's, and a language model's loss under
// FP8 against bf16 (skipped elsewhere, saying why).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "libtorch/compat.h"
#include "models/fp8_linear.h"
#include "models/fused_ops_cuda.h"
#include "models/language_model.h"
#include "tests/models/fp8_test_util.h"
#include "tests/models/fused_test_util.h"

namespace dtrain::models {
namespace {

using namespace fp8_testing;

TEST(Fp8Test, TheScaleMapsTheAbsoluteMaximumToTheFormatsLargest) {
  EXPECT_FLOAT_EQ(fp8Scale(torch::tensor(2.0f), kFp8E4m3Max).item<float>(), 224.0f);
  EXPECT_FLOAT_EQ(fp8Scale(torch::tensor(57344.0f), kFp8E5m2Max).item<float>(), 1.0f);
  const float zero = fp8Scale(torch::tensor(0.0f), kFp8E4m3Max).item<float>();
  EXPECT_TRUE(std::isfinite(zero) && zero > 0) << "an all-zero tensor scales finitely: " << zero;
  EXPECT_EQ(fp8Scale(torch::tensor(std::numeric_limits<float>::infinity()), kFp8E4m3Max).item<float>(), 0.0f);
  EXPECT_TRUE(std::isnan(fp8Scale(torch::tensor(std::nanf("")), kFp8E4m3Max).item<float>()));
  EXPECT_EQ(fp8Scale(torch::tensor(2.0, torch::kDouble), kFp8E4m3Max).scalar_type(), torch::kFloat);
}

TEST(Fp8Test, TheScopeNestsAndTakesOnlyCudaProductsOfSixteens) {
  const torch::Tensor x = torch::randn({32, 64}), w = torch::randn({16, 64});
  EXPECT_FALSE(Fp8Scope::active());
  {
    Fp8Scope outer;
    {
      Fp8Scope inner;
      EXPECT_TRUE(Fp8Scope::active());
    }
    EXPECT_TRUE(Fp8Scope::active());
    EXPECT_FALSE(fp8Takes(x, w)) << "a CPU product stays as it is";
  }
  EXPECT_FALSE(Fp8Scope::active());
  const std::string why = fp8Unsupported(torch::kCPU);
  EXPECT_TRUE(why.find("libtorch 2.5 or newer") != std::string::npos ||
              why.find("compute capability 8.9 or newer") != std::string::npos)
      << why;
}

// Each recipe (rowwise where the GPU can run it).
TEST(Fp8Test, TheProductAndItsGradientsFollowFloat32) {
  DTRAIN_SKIP_WITHOUT_FP8();
  for (const Fp8Recipe recipe : {Fp8Recipe::kTensorwise, Fp8Recipe::kRowwise}) {
    SCOPED_TRACE(recipe == Fp8Recipe::kRowwise ? "rowwise" : "tensorwise");
    const std::string why = fp8RecipeUnsupported(recipe, torch::Device(torch::kCUDA, 0));
    if (!why.empty()) {
      std::cout << "skipped: " << why << "\n";
      continue;
    }
    torch::manual_seed(1);
    const auto cuda = torch::TensorOptions().device(torch::kCUDA);
    const torch::Tensor x0 = torch::randn({4, 32, 128}, cuda.dtype(torch::kBFloat16));
    const torch::Tensor w0 = torch::randn({96, 128}, cuda) / 10, b0 = torch::randn({96}, cuda);
    const torch::Tensor g = torch::randn({4, 32, 96}, cuda.dtype(torch::kBFloat16));
    const torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    const torch::Tensor b = b0.clone().requires_grad_(true);
    torch::Tensor y;
    {
      RecipeFor scaling(recipe);
      Fp8Scope fp8;
      ASSERT_TRUE(fp8Takes(x, w));
      y = fp8Linear(x, w, b);
      y.backward(g);
    }
    EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(y.sizes(), (std::vector<int64_t>{4, 32, 96}));
    const torch::Tensor xr = x0.to(torch::kFloat).requires_grad_(true), wr = w0.clone().requires_grad_(true);
    const torch::Tensor br = b0.clone().requires_grad_(true);
    const torch::Tensor yr = torch::linear(xr, wr, br);
    yr.backward(g.to(torch::kFloat));
    // e4m3 keeps 3 mantissa bits, e5m2 2: a few percent, averaged over the sums.
    EXPECT_LT(relativeError(y, yr), 0.05);
    EXPECT_LT(relativeError(x.grad(), xr.grad()), 0.1);
    EXPECT_LT(relativeError(w.grad(), wr.grad()), 0.1);
    EXPECT_EQ(w.grad().scalar_type(), torch::kFloat) << "W's gradient in W's dtype";
    EXPECT_EQ(x.grad().scalar_type(), torch::kBFloat16) << "x's gradient in x's dtype";
    EXPECT_LT(relativeError(b.grad(), br.grad()), 0.01) << "the bias's gradient is summed in float32";
  }
}

TEST(Fp8Test, ZerosLargeValuesAndNanBehave) {
  DTRAIN_SKIP_WITHOUT_FP8();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const torch::Tensor w = torch::randn({32, 64}, cuda);
  Fp8Scope fp8;
  const torch::Tensor zeros = torch::zeros({16, 64}, cuda.dtype(torch::kBFloat16));
  EXPECT_EQ(fp8Linear(zeros, w, {}).abs().max().item<float>(), 0.0f) << "zeros in, zeros out";
  torch::Tensor huge = torch::randn({16, 64}, cuda.dtype(torch::kBFloat16));
  huge[3][5] = 1e30;
  EXPECT_TRUE(torch::isfinite(fp8Linear(huge, w, {})).all().item<bool>()) << "the scale keeps 1e30 in range";
  torch::Tensor nan = torch::randn({16, 64}, cuda.dtype(torch::kBFloat16));
  nan[0][0] = std::nanf("");
  EXPECT_FALSE(torch::isfinite(fp8Linear(nan, w, {})).all().item<bool>()) << "a NaN is not hidden";
}

// The fused cast's bits against libtorch's composition (what fp8_linear.cc
// runs without the kernels), NaN for NaN: sizes on the vector path and off
// it, an unaligned view, zeros, a huge value, values down to fp8's
// subnormals, infinity and NaN, fp32 and bf16 in, e4m3 and e5m2 out.
TEST(Fp8Test, TheFusedCastIsLibtorchsCastBitForBit) {
  DTRAIN_SKIP_WITHOUT_FP8();
  if (!fused::compiledIn()) GTEST_SKIP() << "this build has no fused kernels";
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(11);
  std::vector<std::pair<std::string, torch::Tensor>> inputs;
  const torch::Tensor spread = torch::randn({4099}, cuda) * torch::exp(torch::rand({4099}, cuda) * -20);
  torch::Tensor huge = torch::randn({256, 64}, cuda);
  huge[7][3] = 1e30;
  torch::Tensor inf = torch::randn({64, 64}, cuda);
  inf[1][1] = std::numeric_limits<float>::infinity();
  torch::Tensor nan = torch::randn({64, 64}, cuda);
  nan[5][9] = std::nanf("");
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const std::string d = dtype == torch::kFloat ? "fp32 " : "bf16 ";
    inputs.emplace_back(d + "randn 1000x768", (torch::randn({1000, 768}, cuda) * 3).to(dtype));
    inputs.emplace_back(d + "7 elements", torch::randn({7}, cuda).to(dtype));
    inputs.emplace_back(d + "unaligned view", torch::randn({4103}, cuda).to(dtype).narrow(0, 1, 4099));
    inputs.emplace_back(d + "zeros", torch::zeros({64, 64}, cuda.dtype(dtype)));
    inputs.emplace_back(d + "spread", spread.to(dtype));
    inputs.emplace_back(d + "huge", huge.to(dtype));
    inputs.emplace_back(d + "inf", inf.to(dtype));
    inputs.emplace_back(d + "nan", nan.to(dtype));
  }
  for (const auto& [name, x] : inputs) {
    for (const bool e5m2 : {false, true}) {
      SCOPED_TRACE(name + (e5m2 ? " to e5m2" : " to e4m3"));
      const double max = e5m2 ? kFp8E5m2Max : kFp8E4m3Max;
      const auto type = e5m2 ? compat::float8E5m2() : compat::float8E4m3();
      const torch::Tensor wide = x.to(torch::kFloat);
      const torch::Tensor scale = fp8Scale(wide.abs().max(), max);
      const torch::Tensor want = (wide * scale).clamp(-max, max).to(type);
      const std::optional<fused::Fp8Cast> got = fused::fp8Cast(x, e5m2);
      ASSERT_TRUE(got.has_value());
      ASSERT_EQ(got->data.scalar_type(), type);
      ASSERT_EQ(got->data.sizes(), x.sizes());
      const auto bits = [](const torch::Tensor& t) { return t.reshape({-1}).view(torch::kInt).cpu(); };
      EXPECT_TRUE(torch::equal(bits(got->scale), bits(scale))) << got->scale.item<float>() << " vs " << scale.item<float>();
      EXPECT_TRUE(torch::equal(bits(got->inverse), bits(scale.reciprocal())));
      const torch::Tensor got_nan = got->data.to(torch::kFloat).isnan(), want_nan = want.to(torch::kFloat).isnan();
      EXPECT_TRUE(torch::equal(got_nan, want_nan)) << "NaN where libtorch has NaN";
      const torch::Tensor got_bits = got->data.view(torch::kByte).masked_fill(got_nan, 0);
      const torch::Tensor want_bits = want.view(torch::kByte).masked_fill(want_nan, 0);
      EXPECT_EQ((got_bits != want_bits).sum().item<int64_t>(), 0) << "elements whose bits differ";
    }
  }
}

// The cast that writes its transpose too: data bit for bit fp8Cast's, the
// transpose bit for bit data.t(), on tile-sized and ragged shapes, with
// zeros, a huge value, infinity and NaN; shapes it cannot take declined.
TEST(Fp8Test, TheTransposingCastIsTheCastAndItsTranspose) {
  DTRAIN_SKIP_WITHOUT_FP8();
  if (!fused::compiledIn()) GTEST_SKIP() << "this build has no fused kernels";
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(12);
  std::vector<std::pair<std::string, torch::Tensor>> inputs;
  torch::Tensor special = torch::randn({80, 48}, cuda);
  special[7][3] = 1e30;
  special[1][1] = std::numeric_limits<float>::infinity();
  special[79][47] = std::nanf("");
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const std::string d = dtype == torch::kFloat ? "fp32 " : "bf16 ";
    inputs.emplace_back(d + "randn 1024x768", (torch::randn({1024, 768}, cuda) * 3).to(dtype));
    inputs.emplace_back(d + "ragged 208x112", torch::randn({208, 112}, cuda).to(dtype));
    inputs.emplace_back(d + "one tile row 16x4096", torch::randn({16, 4096}, cuda).to(dtype));
    inputs.emplace_back(d + "zeros", torch::zeros({64, 64}, cuda.dtype(dtype)));
    inputs.emplace_back(d + "huge, inf, nan", special.to(dtype));
  }
  const auto bits = [](const torch::Tensor& t) { return t.contiguous().reshape({-1}).view(torch::kByte).cpu(); };
  for (const auto& [name, x] : inputs) {
    for (const bool e5m2 : {false, true}) {
      SCOPED_TRACE(name + (e5m2 ? " to e5m2" : " to e4m3"));
      const std::optional<fused::Fp8Cast> one = fused::fp8Cast(x, e5m2);
      const std::optional<fused::Fp8Cast> both = fused::fp8CastTransposed(x, e5m2);
      ASSERT_TRUE(one.has_value() && both.has_value());
      ASSERT_EQ(both->transposed.sizes(), (std::vector<int64_t>{x.size(1), x.size(0)}));
      EXPECT_TRUE(both->transposed.is_contiguous());
      EXPECT_TRUE(torch::equal(bits(both->scale), bits(one->scale)));
      EXPECT_TRUE(torch::equal(bits(both->inverse), bits(one->inverse)));
      EXPECT_TRUE(torch::equal(bits(both->data), bits(one->data))) << "the row-major copy";
      EXPECT_TRUE(torch::equal(bits(both->transposed), bits(one->data.t()))) << "the transpose";
    }
  }
  EXPECT_FALSE(fused::fp8CastTransposed(torch::randn({24, 64}, cuda), false).has_value()) << "rows not a multiple of 16";
  EXPECT_FALSE(fused::fp8CastTransposed(torch::randn({64}, cuda), false).has_value()) << "not 2-D";
}

// Products reading one tensor share its cast; a tensor changed in place
// between them is cast again.
TEST(Fp8Test, AnInputChangedInPlaceIsCastAgain) {
  DTRAIN_SKIP_WITHOUT_FP8();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(13);
  const torch::Tensor w = torch::randn({32, 64}, cuda);
  torch::Tensor x = torch::randn({16, 64}, cuda.dtype(torch::kBFloat16));
  Fp8Scope fp8;
  const torch::Tensor first = fp8Linear(x, w, {});
  EXPECT_TRUE(torch::equal(fp8Linear(x, w, {}), first)) << "the same input, the same product";
  x.mul_(2);
  const torch::Tensor doubled = fp8Linear(x, w, {});
  EXPECT_FALSE(torch::equal(doubled, first)) << "x changed in place must not reuse the old cast";
  EXPECT_LT(relativeError(doubled, first * 2), 0.05);
}

TEST(Fp8Test, ALanguageModelsLossUnderFp8FollowsBf16) {
  DTRAIN_SKIP_WITHOUT_FP8();
  LanguageModelOverrides o;
  o.layers = 2;
  o.dim = 128;
  o.heads = 4;
  o.ffn_dim = 256;
  o.seq_len = 64;
  o.vocab_size = 512;
  for (const char* family : {"llama", "gpt2"}) {
    SCOPED_TRACE(family);
    o.kv_heads = std::string(family) == "llama" ? std::optional<int64_t>(2) : std::nullopt;
    torch::manual_seed(3);
    const auto model = createLanguageModel(namedLanguageModel(family, o));
    model->to(torch::kCUDA);
    const torch::Tensor tokens = torch::randint(512, {4, 64}, torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA));
    torch::Tensor bf16, fp8;
    {
      testing::Bf16Autocast autocast;
      bf16 = model->loss(tokens, tokens).detach();
      Fp8Scope scope;
      fp8 = model->loss(tokens, tokens);
    }
    fp8.backward();
    EXPECT_NEAR(fp8.item<double>(), bf16.item<double>(), 0.03 * bf16.item<double>());
    std::vector<torch::Tensor> grads;
    for (const torch::Tensor& p : model->parameters()) {
      ASSERT_TRUE(p.grad().defined());
      EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>());
      grads.push_back(p.grad().clone());
      p.mutable_grad() = torch::Tensor();
    }
    // Recomputed in backward, the blocks' products are FP8 again: the same gradients.
    model->setActivationCheckpointing(true);
    {
      testing::Bf16Autocast autocast;
      Fp8Scope scope;
      model->loss(tokens, tokens).backward();
    }
    size_t i = 0;
    for (const torch::Tensor& p : model->parameters()) {
      EXPECT_LT(relativeError(p.grad(), grads[i++]), 1e-3) << "parameter " << i - 1;
    }
  }
}

}  // namespace
}  // namespace dtrain::models
