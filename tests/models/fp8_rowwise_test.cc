// --fp8-recipe rowwise (models/fp8_linear.h): the axiswise cast against
// libtorch's operations, an outlier kept to its row, and a language
// model's loss against bf16; on a GPU of compute capability 9.0 or newer
// with libtorch 2.5+ (skipped elsewhere, saying why).
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

// Equal floats or bytes, NaN where the other has NaN (any NaN's bits).
void expectSameNanAware(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const torch::Tensor g = got.contiguous(), w = want.contiguous();
  const torch::Tensor got_nan = g.to(torch::kFloat).isnan(), want_nan = w.to(torch::kFloat).isnan();
  EXPECT_TRUE(torch::equal(got_nan, want_nan)) << what << ": NaN where libtorch has NaN";
  const auto raw = [](const torch::Tensor& t) {
    return t.element_size() == 1 ? t.view(torch::kByte).to(torch::kInt) : t.view(torch::kInt);
  };
  const torch::Tensor differ = (raw(g) != raw(w)).logical_and(got_nan.logical_not());
  EXPECT_EQ(differ.sum().item<int64_t>(), 0) << what << ": elements whose bits differ";
}

// The rowwise recipe's cast (a scale per row for data, per column for its
// transpose, powers of two, e4m3) against libtorch's operations, on
// tile-sized and ragged shapes, zeros, a huge value, infinity and NaN.
TEST(Fp8RowwiseTest, TheAxiswiseCastIsLibtorchsBitForBit) {
  DTRAIN_SKIP_WITHOUT_FP8();
  if (!fused::compiledIn()) GTEST_SKIP() << "this build has no fused kernels";
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(15);
  torch::Tensor special = torch::randn({80, 48}, cuda);
  special[7][3] = 1e30;
  special[1][1] = std::numeric_limits<float>::infinity();
  special[79][47] = std::nanf("");
  std::vector<std::pair<std::string, torch::Tensor>> inputs;
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const std::string d = dtype == torch::kFloat ? "fp32 " : "bf16 ";
    inputs.emplace_back(d + "randn 1024x768, rows of other sizes",
                        (torch::randn({1024, 768}, cuda) * torch::exp(torch::randn({1024, 1}, cuda) * 3)).to(dtype));
    inputs.emplace_back(d + "ragged 208x112", torch::randn({208, 112}, cuda).to(dtype));
    inputs.emplace_back(d + "zeros", torch::zeros({64, 64}, cuda.dtype(dtype)));
    inputs.emplace_back(d + "huge, inf, nan", special.to(dtype));
  }
  const auto pow2 = [](const torch::Tensor& s) {
    const torch::Tensor masked =
        s.view(torch::kInt).bitwise_and(static_cast<int64_t>(static_cast<int32_t>(0xff800000u))).view(torch::kFloat);
    return torch::where(torch::isfinite(s), masked, s);
  };
  for (const auto& [name, x] : inputs) {
    SCOPED_TRACE(name);
    const torch::Tensor wide = x.to(torch::kFloat);
    const torch::Tensor row_scale = pow2(fp8Scale(wide.abs().amax({1}, true), kFp8E4m3Max));
    const torch::Tensor col_scale = pow2(fp8Scale(wide.abs().amax({0}, true), kFp8E4m3Max));
    const torch::Tensor data = (wide * row_scale).clamp(-kFp8E4m3Max, kFp8E4m3Max).to(compat::float8E4m3());
    const torch::Tensor transposed =
        (wide * col_scale).clamp(-kFp8E4m3Max, kFp8E4m3Max).to(compat::float8E4m3()).t().contiguous();
    const std::optional<fused::Fp8Cast> got = fused::fp8CastAxiswise(x);
    ASSERT_TRUE(got.has_value());
    expectSameNanAware(got->data, data, "rows");
    expectSameNanAware(got->transposed, transposed, "columns");
    expectSameNanAware(got->inverse, row_scale.reciprocal().reshape({-1}), "the rows' inverses");
    expectSameNanAware(got->transposed_inverse, col_scale.reciprocal().reshape({-1}), "the columns' inverses");
  }
  EXPECT_FALSE(fused::fp8CastAxiswise(torch::randn({24, 64}, cuda)).has_value()) << "rows not a multiple of 16";
}

// A huge value in one row of x spoils that row only under rowwise
// scaling, where one tensorwise scale loses the other rows.
TEST(Fp8RowwiseTest, AnOutlierStaysInItsRow) {
  DTRAIN_SKIP_WITHOUT_FP8();
  const std::string why = fp8RecipeUnsupported(Fp8Recipe::kRowwise, torch::Device(torch::kCUDA, 0));
  if (!why.empty()) GTEST_SKIP() << why;
  torch::manual_seed(16);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const torch::Tensor x0 = torch::randn({4, 32, 128}, cuda.dtype(torch::kBFloat16));
  const torch::Tensor w0 = torch::randn({96, 128}, cuda) / 10;
  // Row 0 of x holds 1e6: one tensorwise scale puts the other rows'
  // values (about 1) below e4m3's smallest subnormal; each recipe.
  torch::Tensor outlier = x0.reshape({-1, 128}).clone();
  outlier[0][0] = 1e6;
  const torch::Tensor reference = torch::linear(outlier.to(torch::kFloat), w0, {}).narrow(0, 1, 127);
  double error[2];
  for (const Fp8Recipe r : {Fp8Recipe::kTensorwise, Fp8Recipe::kRowwise}) {
    RecipeFor recipe(r);
    Fp8Scope fp8;
    error[r == Fp8Recipe::kRowwise] = relativeError(fp8Linear(outlier, w0, {}).narrow(0, 1, 127), reference);
  }
  EXPECT_LT(error[1], 0.05) << "rowwise: the other rows keep their precision";
  EXPECT_GT(error[0], 0.5) << "tensorwise: one scale for all rows (errors " << error[0] << ", " << error[1]
                                    << ")";
}

// A tiny llama's loss under the rowwise recipe follows bf16, its
// gradients finite.
TEST(Fp8RowwiseTest, ALanguageModelsLossFollowsBf16) {
  DTRAIN_SKIP_WITHOUT_FP8();
  const std::string why = fp8RecipeUnsupported(Fp8Recipe::kRowwise, torch::Device(torch::kCUDA, 0));
  if (!why.empty()) GTEST_SKIP() << why;
  const LanguageModelOverrides o = tinyLlama();
  torch::manual_seed(3);
  const auto model = createLanguageModel(namedLanguageModel("llama", o));
  model->to(torch::kCUDA);
  const torch::Tensor tokens = tinyTokens();
  torch::Tensor bf16, fp8;
  {
    testing::Bf16Autocast autocast;
    bf16 = model->loss(tokens, tokens).detach();
    RecipeFor rowwise(Fp8Recipe::kRowwise);
    Fp8Scope scope;
    fp8 = model->loss(tokens, tokens);
    fp8.backward();
  }
  EXPECT_NEAR(fp8.item<double>(), bf16.item<double>(), 0.03 * bf16.item<double>());
  for (const torch::Tensor& p : model->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>());
  }
}

}  // namespace
}  // namespace dtrain::models
