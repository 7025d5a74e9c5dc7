// Noted absolute maxima (models/fp8_linear.h's noteAbsoluteMaximum): when a
// note holds, on any machine; on a GPU, a product reading a noted maximum
// of its weight; on any CUDA GPU, the maxima the fused norm and SwiGLU
// kernels note beside their outputs; and a language model's loss and
// gradients the same bits with notes and without (skipped elsewhere,
// saying why).
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

// The absolute maxima the fused norm and SwiGLU kernels note beside their
// outputs inside an Fp8Scope (fused_ops_support.h's amaxSlot): any CUDA GPU
// (no FP8 product runs here), skipped without one or without the kernels.

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
