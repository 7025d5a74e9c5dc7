// Fused cross-entropy (loss + dlogits in place) against the CPU reference.
#include "models/kernels/cross_entropy.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <random>
#include <string>

#include "kernel_reference.h"
#include "kernel_test_util.h"

namespace dtrain::kernels::testing {
namespace {

struct CeCase {
  DType dtype;
  int64_t rows;
  int vocab;
  int64_t row_stride;  // >= vocab: padded columns
  IndexType targets = IndexType::kInt64;
};

std::string ce_name(const ::testing::TestParamInfo<CeCase>& info) {
  const CeCase& c = info.param;
  return std::string(dtype_name(c.dtype)) + "_r" + std::to_string(c.rows) + "_v" + std::to_string(c.vocab) + "_s" +
         std::to_string(c.row_stride) + (c.targets == IndexType::kInt32 ? "_i32" : "_i64");
}

constexpr int64_t kIgnore = -100;

class CrossEntropyTest : public ::testing::TestWithParam<CeCase> {};

TEST_P(CrossEntropyTest, LossAndGradientMatchReference) {
  DTRAIN_SKIP_WITHOUT_GPU();
  const CeCase c = GetParam();
  const size_t n = static_cast<size_t>(c.rows) * c.row_stride;
  auto logits = random_values(n, 51, c.dtype, 3.f);
  // Row 1: all logits equal (softmax uniform, loss log(vocab)); row 2 ignored;
  // padded columns hold garbage that must not count.
  for (int j = 0; j < c.row_stride; ++j) logits[c.row_stride + j] = j < c.vocab ? 1.5f : 1e4f;
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t j = c.vocab; j < c.row_stride; ++j) logits[r * c.row_stride + j] = round_to(c.dtype, 50.f + j % 7);
  }
  std::mt19937 gen(52);
  std::vector<int64_t> targets(c.rows);
  for (auto& t : targets) t = std::uniform_int_distribution<int64_t>(0, c.vocab - 1)(gen);
  targets[0] = c.vocab - 1;  // the last real column
  if (c.rows > 2) targets[2] = kIgnore;
  DeviceTensor logits_d(logits, c.dtype), losses(c.rows, DType::kFloat32), lse(c.rows, DType::kFloat32);
  void* targets_d = nullptr;
  const size_t tsize = c.targets == IndexType::kInt64 ? 8 : 4;
  DTRAIN_CUDA_OK(cudaMalloc(&targets_d, c.rows * tsize));
  if (c.targets == IndexType::kInt64) {
    DTRAIN_CUDA_OK(cudaMemcpy(targets_d, targets.data(), c.rows * 8, cudaMemcpyHostToDevice));
  } else {
    std::vector<int32_t> t32(targets.begin(), targets.end());
    DTRAIN_CUDA_OK(cudaMemcpy(targets_d, t32.data(), c.rows * 4, cudaMemcpyHostToDevice));
  }
  const double scale = 1.0 / (c.rows > 2 ? c.rows - 1 : c.rows);
  DeviceTensor scale_d(std::vector<float>{2.f}, DType::kFloat32);

  CrossEntropyArgs a;
  a.logits = logits_d.data();
  a.targets = targets_d;
  a.target_type = c.targets;
  a.losses = losses.f32();
  a.lse = lse.f32();
  a.rows = c.rows;
  a.vocab = c.vocab;
  a.row_stride = c.row_stride;
  a.ignore_index = kIgnore;
  a.grad_scale = static_cast<float>(scale / 2);
  a.grad_scale_device = scale_d.f32();  // 2 * scale / 2
  a.dtype = c.dtype;
  DTRAIN_CUDA_OK(cross_entropy_forward_backward(a, nullptr));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());

  const auto ref = reference::cross_entropy(logits, targets, c.rows, c.vocab, c.row_stride, kIgnore, scale);
  // Losses and lse are fp32 computed from the same inputs: 1e-5 relative to
  // the magnitude of lse.
  std::vector<double> lse_scale(c.rows);
  for (int64_t r = 0; r < c.rows; ++r) lse_scale[r] = std::fabs(ref.lse[r]) + 1.0;
  EXPECT_TRUE(all_close(losses.download(), ref.loss, 1e-5, &lse_scale)) << "loss";
  EXPECT_TRUE(all_close(lse.download(), ref.lse, 1e-5, &lse_scale)) << "lse";
  const auto loss = losses.download();
  EXPECT_NEAR(loss[1], std::log(static_cast<double>(c.vocab)), 1e-4) << "all-equal row";
  if (c.rows > 2) {
    EXPECT_EQ(loss[2], 0.f) << "ignored row";
  }
  const auto dlogits = logits_d.download();
  EXPECT_TRUE(all_close(dlogits, ref.dlogits, rtol_for(c.dtype))) << "dlogits";
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t j = c.vocab; j < c.row_stride; ++j) ASSERT_EQ(dlogits[r * c.row_stride + j], 0.f) << "padding";
  }
  if (c.rows > 2) {
    for (int64_t j = 0; j < c.row_stride; ++j) ASSERT_EQ(dlogits[2 * c.row_stride + j], 0.f) << "ignored row";
  }
  // Each counted row's gradient sums to zero (softmax minus one-hot).
  double row_sum = 0;
  for (int j = 0; j < c.vocab; ++j) row_sum += dlogits[j];
  EXPECT_NEAR(row_sum, 0.0, c.dtype == DType::kFloat32 ? 1e-6 : 1e-3);

  // Losses only: logits untouched.
  DeviceTensor fresh(logits, c.dtype);
  a.logits = fresh.data();
  a.write_dlogits = false;
  DTRAIN_CUDA_OK(cross_entropy_forward_backward(a, nullptr));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(fresh.download(), logits);
  EXPECT_TRUE(all_close(losses.download(), ref.loss, 1e-5, &lse_scale)) << "loss without dlogits";
  cudaFree(targets_d);
}

std::vector<CeCase> ce_cases() {
  std::vector<CeCase> out;
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    out.push_back({t, 37, 50257, 50304});                       // GPT-2, padded
    out.push_back({t, 37, 50304, 50304});                       // padded vocabulary counted whole
    out.push_back({t, 19, 128256, 128256, IndexType::kInt32});  // Llama 3
    out.push_back({t, 11, 50257, 50257});                       // unpadded odd row: scalar path
    out.push_back({t, 3, 1000, 1024, IndexType::kInt32});
  }
  out.push_back({DType::kBFloat16, 2, 8, 8});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, CrossEntropyTest, ::testing::ValuesIn(ce_cases()), ce_name);

TEST(CrossEntropyKernel, OutOfRangeTargetGivesNaNLossAndIsDeterministic) {
  DTRAIN_SKIP_WITHOUT_GPU();
  const int64_t rows = 64;
  const int vocab = 50257, stride = 50304;
  const auto logits = random_values(rows * stride, 61, DType::kBFloat16, 3.f);
  std::vector<int64_t> targets(rows, 5);
  targets[3] = vocab;  // a padded column is not a valid target
  void* targets_d = nullptr;
  DTRAIN_CUDA_OK(cudaMalloc(&targets_d, rows * 8));
  DTRAIN_CUDA_OK(cudaMemcpy(targets_d, targets.data(), rows * 8, cudaMemcpyHostToDevice));
  DeviceTensor l1(logits, DType::kBFloat16), l2(logits, DType::kBFloat16), losses(rows, DType::kFloat32);
  CrossEntropyArgs a;
  a.logits = l1.data();
  a.targets = targets_d;
  a.losses = losses.f32();
  a.rows = rows;
  a.vocab = vocab;
  a.row_stride = stride;
  DTRAIN_CUDA_OK(cross_entropy_forward_backward(a, nullptr));
  a.logits = l2.data();
  DTRAIN_CUDA_OK(cross_entropy_forward_backward(a, nullptr));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(std::isnan(losses.download()[3]));
  EXPECT_FALSE(std::isnan(losses.download()[4]));
  EXPECT_EQ(l1.bytes(), l2.bytes());
  cudaFree(targets_d);
}

TEST(CrossEntropyKernel, RejectsBadArgumentsWithoutTouchingTheDevice) {
  CrossEntropyArgs a;
  a.logits = reinterpret_cast<void*>(0x10000);
  a.targets = a.logits;
  a.losses = reinterpret_cast<float*>(0x10000);
  a.rows = 4;
  a.vocab = 50257;
  a.row_stride = 50000;  // narrower than the vocabulary
  EXPECT_EQ(cross_entropy_forward_backward(a, nullptr), cudaErrorInvalidValue);
  a.row_stride = 50304;
  a.losses = nullptr;
  EXPECT_EQ(cross_entropy_forward_backward(a, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace dtrain::kernels::testing
