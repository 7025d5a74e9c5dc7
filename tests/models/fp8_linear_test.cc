// FP8 products (models/fp8_linear.h): the scale from an absolute maximum,
// the scope, and why FP8 cannot run here, on any machine; on a GPU of
// compute capability 8.9 or newer with libtorch 2.5+, the product and its
// gradients against float32 ones, zeros, saturation and NaN, and a language
// model's loss under FP8 against bf16, and the same bits with the maxima
// the fused kernels note (skipped elsewhere, saying why). On any CUDA GPU,
// those notes: the norms' and SwiGLU's outputs' absolute maxima.
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
#include "tests/models/fused_test_util.h"

namespace dtrain::models {
namespace {

#define DTRAIN_SKIP_WITHOUT_FP8()                                                                  \
  do {                                                                                             \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "FP8 not testable: no CUDA device";          \
    const std::string dtrain_why_ = fp8Unsupported(torch::Device(torch::kCUDA, 0));                \
    if (!dtrain_why_.empty()) GTEST_SKIP() << "FP8 not testable: " << dtrain_why_;                 \
  } while (0)

double relativeError(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kDouble) - want.to(torch::kDouble)).norm().item<double>() /
         want.to(torch::kDouble).norm().item<double>();
}

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

// The recipe of the scope for a test, tensorwise again after it.
class RecipeFor {
 public:
  explicit RecipeFor(Fp8Recipe r) { setFp8Recipe(r); }
  ~RecipeFor() { setFp8Recipe(Fp8Recipe::kTensorwise); }
};

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

torch::Tensor amaxBitsOf(const torch::Tensor& t) {
  const float amax = t.abs().max().item<float>();
  int32_t bits;
  std::memcpy(&bits, &amax, sizeof bits);
  return torch::full({1}, bits, torch::TensorOptions().dtype(torch::kInt).device(t.device()));
}

// A note holds for the tensor and its dense views of the same memory, not
// for another part of it, and ends with a write in place.
TEST(Fp8NotesTest, ANoteHoldsForTheSameElementsUntilTheyChange) {
  forgetAbsoluteMaxima();
  torch::Tensor w = torch::randn({32, 64});
  const torch::Tensor bits = amaxBitsOf(w);
  EXPECT_FALSE(notedAbsoluteMaximum(w).defined());
  noteAbsoluteMaximum(w, bits);
  ASSERT_TRUE(notedAbsoluteMaximum(w).defined());
  EXPECT_TRUE(notedAbsoluteMaximum(w.view({-1})).defined()) << "a view of the same elements";
  EXPECT_TRUE(notedAbsoluteMaximum(w.t()).defined()) << "a dense view, other order";
  EXPECT_FALSE(notedAbsoluteMaximum(w.narrow(0, 0, 16)).defined()) << "a part";
  EXPECT_FALSE(notedAbsoluteMaximum(w.narrow(0, 16, 16)).defined()) << "another part";
  EXPECT_FALSE(notedAbsoluteMaximum(w.to(torch::kDouble)).defined()) << "a copy";
  EXPECT_FALSE(notedAbsoluteMaximum(w.clone()).defined()) << "a copy";
  w.mul_(2);
  EXPECT_FALSE(notedAbsoluteMaximum(w).defined()) << "written in place after the note";
  noteAbsoluteMaximum(w, amaxBitsOf(w));
  EXPECT_TRUE(notedAbsoluteMaximum(w).defined());
  forgetAbsoluteMaxima();
  EXPECT_FALSE(notedAbsoluteMaximum(w).defined());
  EXPECT_THROW(noteAbsoluteMaximum(w, torch::zeros({1})), ConfigError) << "float32, not int32 bits";
  EXPECT_THROW(noteAbsoluteMaximum(w, torch::zeros({2}, torch::kInt)), ConfigError) << "two elements";
}

// A cast takes the noted maximum: with the right one the same bits as
// measuring it, with a wrong one (proving it is read) another result; a
// weight changed in place is measured again.
TEST(Fp8NotesTest, TheProductReadsANotedMaximumOfItsWeight) {
  DTRAIN_SKIP_WITHOUT_FP8();
  if (!fused::compiledIn()) GTEST_SKIP() << "this build has no fused kernels";
  forgetAbsoluteMaxima();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(14);
  torch::Tensor w = torch::randn({64, 128}, cuda);
  const torch::Tensor x = torch::randn({32, 128}, cuda.dtype(torch::kBFloat16));
  Fp8Scope fp8;
  const torch::Tensor measured = fp8Linear(x, w, {});
  const AbsoluteMaximumCounts before = absoluteMaximumCounts();
  noteAbsoluteMaximum(w, amaxBitsOf(w));
  EXPECT_TRUE(torch::equal(fp8Linear(x, w, {}), measured)) << "the noted maximum is the measured one";
  EXPECT_EQ(absoluteMaximumCounts().noted, before.noted + 1);
  // Not a power of two apart (which would scale every element exactly).
  noteAbsoluteMaximum(w, amaxBitsOf(w * 3));
  EXPECT_FALSE(torch::equal(fp8Linear(x, w, {}), measured)) << "a wrong note is read, so the right one was";
  w.mul_(1);  // the same values, a new version
  EXPECT_TRUE(torch::equal(fp8Linear(x, w, {}), measured)) << "after a write in place the weight is measured";
  forgetAbsoluteMaxima();
}

// The tiny llama of the whole-model tests (GQA: 2 key/value heads), and a
// batch of 4 rows of its tokens on the GPU.
LanguageModelOverrides tinyLlama() {
  LanguageModelOverrides o;
  o.layers = 2;
  o.dim = 128;
  o.heads = 4;
  o.kv_heads = 2;
  o.ffn_dim = 256;
  o.seq_len = 64;
  o.vocab_size = 512;
  return o;
}

torch::Tensor tinyTokens() {
  return torch::randint(512, {4, 64}, torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA));
}

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

// The absolute maxima the fused norm and SwiGLU kernels note beside their
// outputs inside an Fp8Scope (fused_ops_support.h's amaxSlot): any CUDA GPU
// (no FP8 product runs here), skipped without one or without the kernels.

// Bit patterns, so that a NaN equals itself.
torch::Tensor bitsOf(const torch::Tensor& t) {
  return t.contiguous().view(t.element_size() == 2 ? torch::kShort : torch::kInt).cpu();
}

// The note on `out` is there, and its bits as a float are max |out| (a NaN
// for a NaN).
void expectNotedMaximum(const torch::Tensor& out, const std::string& what) {
  const torch::Tensor bits = notedAbsoluteMaximum(out);
  ASSERT_TRUE(bits.defined()) << what << ": no note";
  ASSERT_EQ(bits.scalar_type(), torch::kInt);
  const float noted = bits.view(torch::kFloat).item<float>();
  const float want = out.abs().max().item<float>();
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(noted)) << what << ": noted " << noted << " where the maximum is NaN";
  } else {
    EXPECT_EQ(noted, want) << what;
  }
}

// The same output written with a note (inside an Fp8Scope) and without.
void expectNotedAndUnchanged(const torch::Tensor& with_note, const torch::Tensor& without, const std::string& what) {
  EXPECT_EQ(with_note.scalar_type(), without.scalar_type()) << what;
  EXPECT_TRUE(torch::equal(bitsOf(with_note), bitsOf(without))) << what << ": the output changed with a note";
  EXPECT_FALSE(notedAbsoluteMaximum(without).defined()) << what << ": a note outside an Fp8Scope";
  expectNotedMaximum(with_note, what);
}

// [rows, cols] fp32 inputs: plain, zeros, a huge value, infinity, NaN; and
// a huge weight, which makes some of y infinite.
struct NotedCase {
  std::string name;
  torch::Tensor x, weight;
};

std::vector<NotedCase> notedCases(int64_t rows, int64_t cols) {
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const torch::Tensor w = torch::randn({cols}, cuda) * 0.2 + 1;
  std::vector<NotedCase> cases;
  cases.push_back({"randn", torch::randn({rows, cols}, cuda) * 3, w});
  cases.push_back({"zeros", torch::zeros({rows, cols}, cuda), w});
  torch::Tensor huge = torch::randn({rows, cols}, cuda);
  huge[3][5] = 1e30;
  cases.push_back({"huge", huge, w});
  torch::Tensor inf = torch::randn({rows, cols}, cuda);
  inf[1][1] = std::numeric_limits<float>::infinity();
  cases.push_back({"inf", inf, w});
  torch::Tensor nan = torch::randn({rows, cols}, cuda);
  nan[rows - 1][cols - 1] = std::nanf("");
  cases.push_back({"nan", nan, w});
  torch::Tensor big_weight = w.clone();
  big_weight[7] = 3e38;
  cases.push_back({"huge weight", torch::randn({rows, cols}, cuda) * 3, big_weight});
  return cases;
}

std::string shapeName(int64_t rows, int64_t cols) { return std::to_string(rows) + "x" + std::to_string(cols); }

TEST(Fp8NotedMaximumTest, NormsNoteTheirOutputsAbsoluteMaximum) {
  DTRAIN_SKIP_WITHOUT_FUSED_KERNELS();
  torch::manual_seed(21);
  const double eps = 1e-5;
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{64, 256}, {208, 4096}}) {
      for (const NotedCase& c : notedCases(rows, cols)) {
        const std::string what = std::string(dtype == torch::kFloat ? "fp32 " : "bf16 ") + shapeName(rows, cols) +
                                 " " + c.name;
        SCOPED_TRACE(what);
        const torch::Tensor x = c.x.to(dtype), w = c.weight.to(dtype);
        const torch::Tensor b = (torch::randn({cols}, c.x.options()) * 0.1).to(dtype);
        const torch::Tensor residual = torch::randn({rows, cols}, c.x.options()).to(dtype);
        // Each norm's normed output, without and then with an Fp8Scope.
        const std::vector<std::pair<std::string, std::function<torch::Tensor()>>> norms = {
            {"rms", [&] { return fused::rmsNorm(x, w, eps).value(); }},
            {"layer", [&] { return fused::layerNorm(x, w, b, eps).value(); }},
            {"residual + rms", [&] { return fused::addRmsNorm(residual, x, w, eps).value().normed; }},
            {"residual + layer", [&] { return fused::addLayerNorm(residual, x, w, b, eps).value().normed; }},
        };
        for (const auto& [name, norm] : norms) {
          const torch::Tensor without = norm();
          torch::Tensor with_note;
          {
            Fp8Scope fp8;
            with_note = norm();
          }
          expectNotedAndUnchanged(with_note, without, name);
        }
        if (dtype != torch::kFloat) continue;
        // An fp32 stream under bf16 autocast: y in bf16 (bf16_y), the
        // update in bf16 (bf16_x); the note is on the bf16 y returned.
        const torch::Tensor update = x.to(torch::kBFloat16);
        const std::vector<std::pair<std::string, std::function<torch::Tensor()>>> narrowed = {
            {"autocast rms", [&] { return fused::rmsNorm(x, w, eps).value(); }},
            {"autocast layer", [&] { return fused::layerNorm(x, w, b, eps).value(); }},
            {"autocast residual + rms", [&] { return fused::addRmsNorm(residual, update, w, eps).value().normed; }},
            {"autocast residual + layer",
             [&] { return fused::addLayerNorm(residual, update, w, b, eps).value().normed; }},
        };
        for (const auto& [name, norm] : narrowed) {
          testing::Bf16Autocast autocast;
          const torch::Tensor without = norm();
          ASSERT_EQ(without.scalar_type(), torch::kBFloat16) << name;
          torch::Tensor with_note;
          {
            Fp8Scope fp8;
            with_note = norm();
          }
          expectNotedAndUnchanged(with_note, without, name);
        }
      }
    }
  }
}

TEST(Fp8NotedMaximumTest, OnlyOutputsAnFp8CastCanTakeAreNoted) {
  DTRAIN_SKIP_WITHOUT_FUSED_KERNELS();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const torch::Tensor w = torch::ones({256}, cuda), ragged_w = torch::ones({200}, cuda);
  Fp8Scope fp8;
  EXPECT_TRUE(notedAbsoluteMaximum(fused::rmsNorm(torch::randn({64, 256}, cuda), w, 1e-5).value()).defined());
  EXPECT_FALSE(notedAbsoluteMaximum(fused::rmsNorm(torch::randn({24, 256}, cuda), w, 1e-5).value()).defined())
      << "rows not a multiple of 16";
  EXPECT_FALSE(notedAbsoluteMaximum(fused::rmsNorm(torch::randn({64, 200}, cuda), ragged_w, 1e-5).value()).defined())
      << "columns not a multiple of 16";
  EXPECT_FALSE(notedAbsoluteMaximum(fused::swiglu(torch::randn({24, 256}, cuda), torch::randn({24, 256}, cuda)).value())
                   .defined())
      << "rows not a multiple of 16";
  setNotedAbsoluteMaximaEnabled(false);
  const torch::Tensor off = fused::rmsNorm(torch::randn({64, 256}, cuda), w, 1e-5).value();
  setNotedAbsoluteMaximaEnabled(true);
  EXPECT_FALSE(notedAbsoluteMaximum(off).defined()) << "notes turned off";
}

// SwiGLU's y and, in backward, the gradients of gate and up (seen by
// hooks on views of the leaves: the tensors backward returned).
struct SwigluRun {
  torch::Tensor y, dgate, dup;
};

SwigluRun runSwiglu(const torch::Tensor& gate, const torch::Tensor& up, const torch::Tensor& dy, bool fp8) {
  const torch::Tensor g = gate.clone().requires_grad_(true), u = up.clone().requires_grad_(true);
  const torch::Tensor gv = g.view(g.sizes()), uv = u.view(u.sizes());
  SwigluRun r;
  gv.register_hook([&r](const torch::Tensor& grad) { r.dgate = grad; });
  uv.register_hook([&r](const torch::Tensor& grad) { r.dup = grad; });
  {
    std::optional<Fp8Scope> scope;
    if (fp8) scope.emplace();
    r.y = fused::swiglu(gv, uv).value();
  }
  // Outside the scope, as a training step's backward: the forward's scope decides.
  r.y.backward(dy);
  return r;
}

TEST(Fp8NotedMaximumTest, SwigluNotesItsOutputAndGradientsAbsoluteMaxima) {
  DTRAIN_SKIP_WITHOUT_FUSED_KERNELS();
  torch::manual_seed(22);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (const auto& [rows, ffn] : {std::pair<int64_t, int64_t>{64, 256}, {208, 4096}}) {
      for (const NotedCase& c : notedCases(rows, ffn)) {
        SCOPED_TRACE(std::string(dtype == torch::kFloat ? "fp32 " : "bf16 ") + shapeName(rows, ffn) + " " + c.name);
        // The case's special values in the gate; up and dy plain.
        const torch::Tensor gate = c.x.to(dtype);
        const torch::Tensor up = (torch::randn({rows, ffn}, c.x.options()) * 2).to(dtype);
        const torch::Tensor dy = torch::randn({rows, ffn}, c.x.options()).to(dtype);
        const SwigluRun without = runSwiglu(gate, up, dy, false);
        const SwigluRun with_note = runSwiglu(gate, up, dy, true);
        ASSERT_TRUE(with_note.dgate.defined() && with_note.dup.defined() && without.dgate.defined());
        expectNotedAndUnchanged(with_note.y, without.y, "y");
        expectNotedAndUnchanged(with_note.dgate, without.dgate, "dgate");
        expectNotedAndUnchanged(with_note.dup, without.dup, "dup");
      }
    }
  }
}

// End to end: a Llama's loss and gradients under FP8 are the same bits
// whether the casts take the kernels' notes or measure their own maxima,
// with and without activation checkpointing; with notes, the casts of the
// norms' outputs (q, k and v share one; gate and up one), SwiGLU's output
// and its two gradients take them: 5 per block.
TEST(Fp8Test, NotedMaximaLeaveALanguageModelsLossAndGradientsAsTheyWere) {
  DTRAIN_SKIP_WITHOUT_FP8();
  if (!fused::compiledIn()) GTEST_SKIP() << "this build has no fused kernels";
  const LanguageModelOverrides o = tinyLlama();
  torch::manual_seed(3);
  const auto model = createLanguageModel(namedLanguageModel("llama", o));
  model->to(torch::kCUDA);
  const torch::Tensor tokens = tinyTokens();
  // The loss and the gradients of one step (notes on or off), gradients reset after.
  auto step = [&](bool noted) {
    struct Restore {
      ~Restore() { setNotedAbsoluteMaximaEnabled(true); }
    } restore;
    setNotedAbsoluteMaximaEnabled(noted);
    torch::Tensor loss;
    {
      testing::Bf16Autocast autocast;
      Fp8Scope scope;
      loss = model->loss(tokens, tokens);
    }
    loss.backward();
    std::vector<torch::Tensor> out{loss.detach()};
    for (const torch::Tensor& p : model->parameters()) {
      out.push_back(p.grad().clone());
      p.mutable_grad() = torch::Tensor();
    }
    return out;
  };
  for (const bool checkpointing : {false, true}) {
    SCOPED_TRACE(checkpointing ? "activation checkpointing" : "no checkpointing");
    model->setActivationCheckpointing(checkpointing);
    const AbsoluteMaximumCounts before = absoluteMaximumCounts();
    const std::vector<torch::Tensor> measured = step(false);
    const AbsoluteMaximumCounts between = absoluteMaximumCounts();
    EXPECT_EQ(between.noted, before.noted) << "notes off: every cast measures its own maximum";
    const std::vector<torch::Tensor> noted = step(true);
    const AbsoluteMaximumCounts after = absoluteMaximumCounts();
    EXPECT_GE(after.noted - between.noted, 5 * o.layers.value()) << "casts that took a noted maximum";
    EXPECT_LT(after.measured - between.measured, between.measured - before.measured)
        << "fewer casts measure their own maximum with notes";
    ASSERT_EQ(noted.size(), measured.size());
    EXPECT_TRUE(torch::equal(bitsOf(noted[0]), bitsOf(measured[0])))
        << "loss " << noted[0].item<double>() << " vs " << measured[0].item<double>();
    for (size_t i = 1; i < noted.size(); ++i) {
      EXPECT_TRUE(torch::equal(bitsOf(noted[i]), bitsOf(measured[i]))) << "gradient of parameter " << i - 1;
    }
  }
}

}  // namespace
}  // namespace dtrain::models
