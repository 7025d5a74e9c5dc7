// Bias + GELU, SwiGLU and a product's bias gradient against the CPU
// reference.
#include "models/kernels/activation.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernel_reference.h"
#include "kernel_test_util.h"

namespace dtrain::kernels::testing {
namespace {

struct GeluCase {
  DType act;
  DType param;
  int64_t rows;
  int cols;
  bool bias = true;
};

std::string gelu_name(const ::testing::TestParamInfo<GeluCase>& info) {
  const GeluCase& c = info.param;
  return std::string(dtype_name(c.act)) + "_" + dtype_name(c.param) + "_r" + std::to_string(c.rows) + "_c" +
         std::to_string(c.cols) + (c.bias ? "_bias" : "");
}

class GeluTest : public ::testing::TestWithParam<GeluCase> {};

TEST_P(GeluTest, ForwardAndBackwardMatchReference) {
  DTRAIN_SKIP_WITHOUT_GPU();
  const GeluCase c = GetParam();
  const size_t n = static_cast<size_t>(c.rows) * c.cols;
  const auto x = random_values(n, 21, c.act, 2.f);
  const auto bias = c.bias ? random_values(c.cols, 22, c.param, 0.5f) : std::vector<float>{};
  const auto dy = random_values(n, 23, c.act);
  DeviceTensor x_d(x, c.act), b_d(c.cols, c.param), y(n, c.act), dy_d(dy, c.act), dx(n, c.act), dbias(c.cols, c.param);
  if (c.bias) b_d.upload(bias);
  const void* bp = c.bias ? b_d.data() : nullptr;
  DTRAIN_CUDA_OK(gelu_forward(y.data(), x_d.data(), bp, c.rows, c.cols, c.act, c.param, nullptr));
  const size_t ws_bytes = gelu_backward_workspace_size(c.rows, c.cols);
  DeviceBytes ws(ws_bytes);
  DTRAIN_CUDA_OK(gelu_backward(dx.data(), c.bias ? dbias.data() : nullptr, false, ws.data(), ws_bytes, dy_d.data(),
                               x_d.data(), bp, c.rows, c.cols, c.act, c.param, nullptr));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(all_close(y.download(), reference::gelu_forward(x, bias, c.rows, c.cols), rtol_for(c.act))) << "y";
  const auto ref = reference::gelu_backward(dy, x, bias, c.rows, c.cols);
  EXPECT_TRUE(all_close(dx.download(), ref.dx, rtol_for(c.act))) << "dx";
  if (c.bias) {
    // dbias sums dx as computed: with bf16 activations, to bf16 accuracy
    // (the hardware tanh), even when dbias itself is fp32.
    const double dbias_rtol = std::max(rtol_for(c.act), rtol_for(c.param));
    EXPECT_TRUE(all_close(dbias.download(), ref.dbias, dbias_rtol, &ref.dbias_abs)) << "dbias";
    const auto first = dbias.bytes();  // deterministic
    dbias.fill_nan();
    DTRAIN_CUDA_OK(gelu_backward(dx.data(), dbias.data(), false, ws.data(), ws_bytes, dy_d.data(), x_d.data(), bp,
                                 c.rows, c.cols, c.act, c.param, nullptr));
    DTRAIN_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(dbias.bytes(), first);
  }
  // The backward that also writes the forward's output again: the same
  // bits as the forward, and the same dx.
  const auto y_first = y.bytes(), dx_first = dx.bytes();
  DeviceTensor y_again(n, c.act);
  y_again.fill_nan();
  DTRAIN_CUDA_OK(gelu_backward(dx.data(), c.bias ? dbias.data() : nullptr, false, ws.data(), ws_bytes, dy_d.data(),
                               x_d.data(), bp, c.rows, c.cols, c.act, c.param, nullptr, y_again.data()));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(y_again.bytes(), y_first) << "y written by the backward";
  EXPECT_EQ(dx.bytes(), dx_first);
}

std::vector<GeluCase> gelu_cases() {
  std::vector<GeluCase> out;
  const std::pair<DType, DType> types[] = {
      {DType::kFloat32, DType::kFloat32}, {DType::kBFloat16, DType::kBFloat16}, {DType::kBFloat16, DType::kFloat32}};
  for (auto [act, param] : types) {
    for (int cols : {64, 768, 3072, 6400}) out.push_back({act, param, 333, cols});
    out.push_back({act, param, 1, 3072});
    out.push_back({act, param, 129, 1001});  // scalar path
    out.push_back({act, param, 77, 3072, false});
  }
  out.push_back({DType::kBFloat16, DType::kBFloat16, 8200, 3072});  // more rows than row groups
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GeluTest, ::testing::ValuesIn(gelu_cases()), gelu_name);

struct SwigluCase {
  DType dtype;
  int64_t rows;
  int ffn;
  bool packed;  // a and b halves of one [rows, 2 * ffn] buffer (and so are da, db)
};

std::string swiglu_name(const ::testing::TestParamInfo<SwigluCase>& info) {
  const SwigluCase& c = info.param;
  return std::string(dtype_name(c.dtype)) + "_r" + std::to_string(c.rows) + "_f" + std::to_string(c.ffn) +
         (c.packed ? "_packed" : "_separate");
}

class SwigluTest : public ::testing::TestWithParam<SwigluCase> {};

TEST_P(SwigluTest, ForwardAndBackwardMatchReference) {
  DTRAIN_SKIP_WITHOUT_GPU();
  const SwigluCase c = GetParam();
  const size_t n = static_cast<size_t>(c.rows) * c.ffn;
  const auto a = random_values(n, 31, c.dtype, 2.f), b = random_values(n, 32, c.dtype),
             dy = random_values(n, 33, c.dtype);
  const int64_t stride = c.packed ? 2 * c.ffn : c.ffn;
  // Packed: [rows, 2 ffn] = [a | b] per row. Separate: two [rows, ffn] tensors.
  DeviceTensor in(2 * n, c.dtype), grad(2 * n, c.dtype), y(n, c.dtype), dy_d(dy, c.dtype);
  const size_t es = dtype_size(c.dtype);
  for (int64_t r = 0; r < c.rows; ++r) {
    const std::vector<float> ar(a.begin() + r * c.ffn, a.begin() + (r + 1) * c.ffn);
    const std::vector<float> br(b.begin() + r * c.ffn, b.begin() + (r + 1) * c.ffn);
    in.upload(ar, c.packed ? r * stride : r * c.ffn);
    in.upload(br, c.packed ? r * stride + c.ffn : n + r * c.ffn);
  }
  char* base = static_cast<char*>(in.data());
  const void* a_p = base;
  const void* b_p = base + (c.packed ? c.ffn : n) * es;
  char* gbase = static_cast<char*>(grad.data());
  void* da_p = gbase;
  void* db_p = gbase + (c.packed ? c.ffn : n) * es;
  DTRAIN_CUDA_OK(swiglu_forward(y.data(), a_p, b_p, c.rows, c.ffn, stride, c.dtype, nullptr));
  DTRAIN_CUDA_OK(swiglu_backward(da_p, db_p, dy_d.data(), a_p, b_p, c.rows, c.ffn, stride, stride, c.dtype, nullptr));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(all_close(y.download(), reference::swiglu_forward(a, b), rtol_for(c.dtype))) << "y";
  std::vector<double> da_ref, db_ref;
  reference::swiglu_backward(dy, a, b, &da_ref, &db_ref);
  std::vector<float> da, db;
  const auto g = grad.download();
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int j = 0; j < c.ffn; ++j) {
      da.push_back(g[c.packed ? r * stride + j : r * c.ffn + j]);
      db.push_back(g[c.packed ? r * stride + c.ffn + j : n + r * c.ffn + j]);
    }
  }
  EXPECT_TRUE(all_close(da, da_ref, rtol_for(c.dtype))) << "da";
  EXPECT_TRUE(all_close(db, db_ref, rtol_for(c.dtype))) << "db";

  // With amax slots: the same bits, and max |y|, |da|, |db| as stored.
  {
    DeviceTensor y2(n, c.dtype), grad2(2 * n, c.dtype);
    y2.fill_nan();
    grad2.fill_nan();
    DeviceAmax y_amax, da_amax, db_amax;
    char* gbase2 = static_cast<char*>(grad2.data());
    DTRAIN_CUDA_OK(swiglu_forward(y2.data(), a_p, b_p, c.rows, c.ffn, stride, c.dtype, nullptr, y_amax.data()));
    DTRAIN_CUDA_OK(swiglu_backward(gbase2, gbase2 + (c.packed ? c.ffn : n) * es, dy_d.data(), a_p, b_p, c.rows, c.ffn,
                                   stride, stride, c.dtype, nullptr, da_amax.data(), db_amax.data()));
    DTRAIN_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> y_stored = y.download();
    EXPECT_EQ(y2.download(), y_stored) << "y with amax_bits";
    EXPECT_EQ(grad2.download(), g) << "da, db with amax_bits";
    EXPECT_TRUE(same_amax(y_amax.bits(), amax_bits_of(y_stored))) << "y";
    EXPECT_TRUE(same_amax(da_amax.bits(), amax_bits_of(da))) << "da";
    EXPECT_TRUE(same_amax(db_amax.bits(), amax_bits_of(db))) << "db";
    // One slot alone: the other gradient's is not written.
    DeviceAmax db_only;
    DTRAIN_CUDA_OK(swiglu_backward(gbase2, gbase2 + (c.packed ? c.ffn : n) * es, dy_d.data(), a_p, b_p, c.rows, c.ffn,
                                   stride, stride, c.dtype, nullptr, nullptr, db_only.data()));
    DTRAIN_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_TRUE(same_amax(db_only.bits(), amax_bits_of(db))) << "db alone";
  }

  // In place: da over a, db over b.
  DTRAIN_CUDA_OK(swiglu_backward(base, base + (c.packed ? c.ffn : n) * es, dy_d.data(), a_p, b_p, c.rows, c.ffn, stride,
                                 stride, c.dtype, nullptr));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(in.download(), g);
}

std::vector<SwigluCase> swiglu_cases() {
  std::vector<SwigluCase> out;
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    for (bool packed : {true, false}) {
      for (int ffn : {64, 2048, 5632, 8192}) out.push_back({t, 129, ffn, packed});
      out.push_back({t, 33, 1001, packed});  // scalar path
    }
  }
  out.push_back({DType::kBFloat16, 4100, 8192, true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, SwigluTest, ::testing::ValuesIn(swiglu_cases()), swiglu_name);

// A product's bias gradient: the column sums of dy, in fp32 from the values
// as stored, written or added, the same bits every time.
struct BiasGradCase {
  DType act;
  DType param;
  int64_t rows;
  int cols;
};

std::string bias_grad_name(const ::testing::TestParamInfo<BiasGradCase>& info) {
  const BiasGradCase& c = info.param;
  return std::string(dtype_name(c.act)) + "_" + dtype_name(c.param) + "_r" + std::to_string(c.rows) + "_c" +
         std::to_string(c.cols);
}

class BiasGradTest : public ::testing::TestWithParam<BiasGradCase> {};

TEST_P(BiasGradTest, ColumnSumsMatchReference) {
  DTRAIN_SKIP_WITHOUT_GPU();
  const BiasGradCase c = GetParam();
  const auto dy = random_values(static_cast<size_t>(c.rows) * c.cols, 31, c.act, 1.f, 0.25f);
  std::vector<double> ref(c.cols, 0.0), scale(c.cols, 0.0);
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int j = 0; j < c.cols; ++j) {
      ref[j] += dy[r * c.cols + j];
      scale[j] += std::abs(dy[r * c.cols + j]);
    }
  }
  DeviceTensor dy_d(dy, c.act), dbias(c.cols, c.param);
  const size_t ws_bytes = bias_grad_workspace_size(c.rows, c.cols);
  DeviceBytes ws(std::max<size_t>(ws_bytes, 16));
  dbias.fill_nan();
  DTRAIN_CUDA_OK(bias_grad(dbias.data(), false, ws.data(), ws_bytes, dy_d.data(), c.rows, c.cols, c.act, c.param,
                           nullptr));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());
  // fp32 sums of exact inputs: fp32 accuracy, then rounded to the parameter's dtype.
  EXPECT_TRUE(all_close(dbias.download(), ref, rtol_for(c.param), &scale)) << "dbias";
  const auto first = dbias.bytes();
  dbias.fill_nan();
  DTRAIN_CUDA_OK(bias_grad(dbias.data(), false, ws.data(), ws_bytes, dy_d.data(), c.rows, c.cols, c.act, c.param,
                           nullptr));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(dbias.bytes(), first) << "deterministic";
  DTRAIN_CUDA_OK(bias_grad(dbias.data(), true, ws.data(), ws_bytes, dy_d.data(), c.rows, c.cols, c.act, c.param,
                           nullptr));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());
  std::vector<double> twice(ref), twice_scale(scale);
  for (int j = 0; j < c.cols; ++j) twice[j] *= 2, twice_scale[j] *= 2;
  EXPECT_TRUE(all_close(dbias.download(), twice, 2 * rtol_for(c.param), &twice_scale)) << "accumulated";
}

std::vector<BiasGradCase> bias_grad_cases() {
  std::vector<BiasGradCase> out;
  const std::pair<DType, DType> types[] = {
      {DType::kFloat32, DType::kFloat32}, {DType::kBFloat16, DType::kBFloat16}, {DType::kBFloat16, DType::kFloat32}};
  for (auto [act, param] : types) {
    for (int cols : {64, 768, 2304}) out.push_back({act, param, 333, cols});
    out.push_back({act, param, 1, 768});
    out.push_back({act, param, 129, 1001});  // scalar path
  }
  out.push_back({DType::kBFloat16, DType::kFloat32, 16384, 768});  // more rows than row groups
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, BiasGradTest, ::testing::ValuesIn(bias_grad_cases()), bias_grad_name);

TEST(ActivationKernels, RejectBadArgumentsWithoutTouchingTheDevice) {
  void* p = reinterpret_cast<void*>(0x10000);
  EXPECT_EQ(gelu_backward(p, p, false, p, gelu_backward_workspace_size(10, 64) - 4, p, p, p, 10, 64, DType::kBFloat16,
                          DType::kBFloat16, nullptr),
            cudaErrorInvalidValue);  // workspace too small
  EXPECT_EQ(gelu_backward(p, p, false, p, 1 << 20, p, p, nullptr, 10, 64, DType::kBFloat16, DType::kBFloat16, nullptr),
            cudaErrorInvalidValue);  // dbias without a bias
  EXPECT_EQ(gelu_forward(p, p, p, 10, 64, DType::kFloat32, DType::kBFloat16, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(swiglu_forward(p, p, p, 10, 64, 32, DType::kBFloat16, nullptr), cudaErrorInvalidValue);  // stride < ffn
  EXPECT_EQ(swiglu_backward(p, p, p, p, p, 0, 64, 64, 64, DType::kBFloat16, nullptr), cudaSuccess);
  EXPECT_EQ(gelu_backward_workspace_size(16384, 3072), gelu_backward_workspace_size(1 << 20, 3072));
  EXPECT_EQ(bias_grad(p, false, p, bias_grad_workspace_size(10, 64) - 4, p, 10, 64, DType::kBFloat16,
                      DType::kFloat32, nullptr),
            cudaErrorInvalidValue);  // workspace too small
  EXPECT_EQ(bias_grad(p, false, p, 1 << 20, p, 10, 64, DType::kFloat32, DType::kBFloat16, nullptr),
            cudaErrorInvalidValue);  // an fp32 gradient into a bf16 bias
}

}  // namespace
}  // namespace dtrain::kernels::testing
