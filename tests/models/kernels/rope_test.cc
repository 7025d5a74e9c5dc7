// Rotary embeddings against the CPU reference, in place and out of place,
// on q/k slices of a fused qkv buffer.
#include "models/kernels/rope.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <string>

#include "kernel_reference.h"
#include "kernel_test_util.h"

namespace dtrain::kernels::testing {
namespace {

struct RopeCase {
  DType dtype;
  int batch;
  int seq_len;
  int q_heads;
  int kv_heads;
  int head_dim;
  bool fused_qkv;  // q and k are slices of [tokens, (hq + 2 hkv) * head_dim]
  bool explicit_positions;
};

std::string rope_name(const ::testing::TestParamInfo<RopeCase>& info) {
  const RopeCase& c = info.param;
  return std::string(dtype_name(c.dtype)) + "_b" + std::to_string(c.batch) + "_t" + std::to_string(c.seq_len) + "_hq" +
         std::to_string(c.q_heads) + "_hkv" + std::to_string(c.kv_heads) + "_d" + std::to_string(c.head_dim) +
         (c.fused_qkv ? "_qkv" : "") + (c.explicit_positions ? "_pos" : "");
}

// Elements [token][col0, col0 + width) of a [tokens, stride] buffer.
std::vector<float> columns(const std::vector<float>& all, int64_t tokens, int64_t stride, int64_t col0, int64_t width) {
  std::vector<float> out;
  out.reserve(tokens * width);
  for (int64_t t = 0; t < tokens; ++t)
    out.insert(out.end(), all.begin() + t * stride + col0, all.begin() + t * stride + col0 + width);
  return out;
}

class RopeTest : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeTest, ForwardAndBackwardMatchReference) {
  DTRAIN_SKIP_WITHOUT_GPU();
  const RopeCase c = GetParam();
  const int64_t tokens = static_cast<int64_t>(c.batch) * c.seq_len;
  const int64_t qw = static_cast<int64_t>(c.q_heads) * c.head_dim, kw = static_cast<int64_t>(c.kv_heads) * c.head_dim;
  const int64_t stride = c.fused_qkv ? qw + 2 * kw : 0;
  const RopeScaling scaling;
  const auto inv_freq = rope_inverse_frequencies(c.head_dim, 500000.0, &scaling);
  std::vector<int32_t> positions(tokens);
  for (int64_t t = 0; t < tokens; ++t)
    positions[t] = c.explicit_positions ? static_cast<int32_t>((t * 7919) % 8192) : t % c.seq_len;
  DeviceTensor freq_d(inv_freq, DType::kFloat32);
  int32_t* pos_d = nullptr;
  DTRAIN_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&pos_d), tokens * sizeof(int32_t)));
  DTRAIN_CUDA_OK(cudaMemcpy(pos_d, positions.data(), tokens * sizeof(int32_t), cudaMemcpyHostToDevice));

  // Inputs: one buffer (fused) or q and k apart; outputs dense q and k.
  const int64_t in_width = c.fused_qkv ? stride : qw + kw;
  const auto in = random_values(tokens * in_width, 41, c.dtype);
  DeviceTensor in_d(in, c.dtype), q_out(tokens * qw, c.dtype), k_out(tokens * kw, c.dtype);
  const size_t es = dtype_size(c.dtype);
  // Unfused: q is the first tokens * qw elements, k the rest.
  const std::vector<float> q =
      c.fused_qkv ? columns(in, tokens, stride, 0, qw) : std::vector<float>(in.begin(), in.begin() + tokens * qw);
  const std::vector<float> k =
      c.fused_qkv ? columns(in, tokens, stride, qw, kw) : std::vector<float>(in.begin() + tokens * qw, in.end());
  RopeArgs a;
  a.q = {in_d.data(), q_out.data(), c.q_heads, stride, 0};
  a.k = {static_cast<char*>(in_d.data()) + (c.fused_qkv ? qw : tokens * qw) * es, k_out.data(), c.kv_heads, stride, 0};
  a.inv_freq = freq_d.f32();
  a.positions = c.explicit_positions ? pos_d : nullptr;
  a.tokens = tokens;
  a.seq_len = c.seq_len;
  a.head_dim = c.head_dim;
  a.dtype = c.dtype;
  DTRAIN_CUDA_OK(rope_forward(a, nullptr));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());
  const auto q_ref = reference::rope(q, tokens, c.q_heads, c.head_dim, inv_freq, positions, 1.0);
  const auto k_ref = reference::rope(k, tokens, c.kv_heads, c.head_dim, inv_freq, positions, 1.0);
  EXPECT_TRUE(all_close(q_out.download(), q_ref, rtol_for(c.dtype))) << "q";
  EXPECT_TRUE(all_close(k_out.download(), k_ref, rtol_for(c.dtype))) << "k";

  // Backward in place on the inputs (the gradients of dense outputs are
  // the inputs of the same layout here): rotation by -angle.
  RopeArgs b = a;
  b.q.out = const_cast<void*>(b.q.in);
  b.k.out = const_cast<void*>(b.k.in);
  b.q.out_token_stride = b.q.in_token_stride;
  b.k.out_token_stride = b.k.in_token_stride;
  DTRAIN_CUDA_OK(rope_backward(b, nullptr));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());
  const auto all = in_d.download();
  const auto dq =
      c.fused_qkv ? columns(all, tokens, stride, 0, qw) : std::vector<float>(all.begin(), all.begin() + tokens * qw);
  const auto dk =
      c.fused_qkv ? columns(all, tokens, stride, qw, kw) : std::vector<float>(all.begin() + tokens * qw, all.end());
  EXPECT_TRUE(
      all_close(dq, reference::rope(q, tokens, c.q_heads, c.head_dim, inv_freq, positions, -1.0), rtol_for(c.dtype)))
      << "dq";
  EXPECT_TRUE(
      all_close(dk, reference::rope(k, tokens, c.kv_heads, c.head_dim, inv_freq, positions, -1.0), rtol_for(c.dtype)))
      << "dk";
  if (c.fused_qkv) {  // v untouched
    EXPECT_EQ(columns(all, tokens, stride, qw + kw, kw), columns(in, tokens, stride, qw + kw, kw));
  }
  cudaFree(pos_d);
}

std::vector<RopeCase> rope_cases() {
  std::vector<RopeCase> out;
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    out.push_back({t, 2, 1024, 12, 12, 64, false, false});  // GPT-2-sized heads
    out.push_back({t, 2, 1024, 32, 8, 64, true, false});    // Llama 3.2 1B
    out.push_back({t, 1, 333, 32, 8, 128, true, true});     // Llama 3 8B heads, positions up to 8191
    out.push_back({t, 3, 17, 5, 1, 6, false, false});       // head_dim 6: scalar path
    out.push_back({t, 1, 77, 4, 2, 64, true, true});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeTest, ::testing::ValuesIn(rope_cases()), rope_name);

TEST(RopeFrequencies, FollowMetasTableAndLlama3Scaling) {
  const auto plain = rope_inverse_frequencies(128, 10000.0);
  ASSERT_EQ(plain.size(), 64u);
  EXPECT_FLOAT_EQ(plain[0], 1.f);
  EXPECT_FLOAT_EQ(plain[1], static_cast<float>(std::pow(10000.0, -2.0 / 128)));
  const RopeScaling scaling;
  const auto scaled = rope_inverse_frequencies(128, 500000.0, &scaling);
  const auto unscaled = rope_inverse_frequencies(128, 500000.0);
  EXPECT_FLOAT_EQ(scaled[0], unscaled[0]);          // short wavelengths: unchanged
  EXPECT_FLOAT_EQ(scaled[63], unscaled[63] / 8.f);  // long wavelengths: divided by the factor
  for (int i = 0; i < 64; ++i) EXPECT_LE(scaled[i], unscaled[i]);
  EXPECT_TRUE(rope_inverse_frequencies(7, 10000.0).empty());
}

TEST(RopeKernels, RejectBadArgumentsWithoutTouchingTheDevice) {
  RopeArgs a;
  a.q = {reinterpret_cast<void*>(0x10000), reinterpret_cast<void*>(0x10000), 4, 0, 0};
  a.inv_freq = reinterpret_cast<float*>(0x10000);
  a.tokens = 10;
  a.seq_len = 10;
  a.head_dim = 7;
  EXPECT_EQ(rope_forward(a, nullptr), cudaErrorInvalidValue);  // odd head_dim
  a.head_dim = 64;
  a.seq_len = 0;
  EXPECT_EQ(rope_forward(a, nullptr), cudaErrorInvalidValue);  // no positions, no seq_len
  a.seq_len = 10;
  a.q.out = nullptr;
  EXPECT_EQ(rope_forward(a, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace dtrain::kernels::testing
