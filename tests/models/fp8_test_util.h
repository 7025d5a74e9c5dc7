// What the FP8 tests share (fp8_linear_test.cc, fp8_rowwise_test.cc,
// fp8_notes_test.cc): the skip without an FP8 GPU, a relative error, the
// recipe for a scope, the tiny llama of the whole-model tests, bit patterns.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <string>

#include "models/fp8_linear.h"
#include "models/language_model.h"

#define DTRAIN_SKIP_WITHOUT_FP8()                                                                  \
  do {                                                                                             \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "FP8 not testable: no CUDA device";          \
    const std::string dtrain_why_ = fp8Unsupported(torch::Device(torch::kCUDA, 0));                \
    if (!dtrain_why_.empty()) GTEST_SKIP() << "FP8 not testable: " << dtrain_why_;                 \
  } while (0)

namespace dtrain::models::fp8_testing {

inline double relativeError(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kDouble) - want.to(torch::kDouble)).norm().item<double>() /
         want.to(torch::kDouble).norm().item<double>();
}

// The recipe of the scope for a test, tensorwise again after it.
class RecipeFor {
 public:
  explicit RecipeFor(Fp8Recipe r) { setFp8Recipe(r); }
  ~RecipeFor() { setFp8Recipe(Fp8Recipe::kTensorwise); }
};

// The tiny llama of the whole-model tests (GQA: 2 key/value heads), and a
// batch of 4 rows of its tokens on the GPU.
inline LanguageModelOverrides tinyLlama() {
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

inline torch::Tensor tinyTokens() {
  return torch::randint(512, {4, 64}, torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA));
}

// Bit patterns, so that a NaN equals itself.
inline torch::Tensor bitsOf(const torch::Tensor& t) {
  return t.contiguous().view(t.element_size() == 2 ? torch::kShort : torch::kInt).cpu();
}

// One int32 on t's device holding max |t|'s bit pattern: a note's slot.
inline torch::Tensor amaxBitsOf(const torch::Tensor& t) {
  const float amax = t.abs().max().item<float>();
  int32_t bits;
  std::memcpy(&bits, &amax, sizeof bits);
  return torch::full({1}, bits, torch::TensorOptions().dtype(torch::kInt).device(t.device()));
}

}  // namespace dtrain::models::fp8_testing
