// LayerNorm / RMSNorm (+ fused residual add) against the CPU reference.
#include "models/kernels/normalization.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <string>

#include "kernel_reference.h"
#include "kernel_test_util.h"

namespace dtrain::kernels::testing {
namespace {

struct NormCase {
  bool rms;
  DType act;
  DType param;
  int64_t rows;
  int cols;
  bool residual = true;   // fused residual add, and a residual gradient in backward
  bool misalign = false;  // x, y, dy, dx one element past a 16-byte boundary: the scalar path
  bool mixed = false;     // fp32 stream, bf16 x, y and dy, dx also as bf16 (autocast's layout)
};

std::string normCaseName(const ::testing::TestParamInfo<NormCase>& info) {
  const NormCase& c = info.param;
  return std::string(c.rms ? "rms" : "ln") + "_" + dtype_name(c.act) + "_" + dtype_name(c.param) + "_r" +
         std::to_string(c.rows) + "_c" + std::to_string(c.cols) + (c.residual ? "_res" : "") +
         (c.misalign ? "_misaligned" : "") + (c.mixed ? "_bf16_io" : "");
}

// A tensor whose data starts `shift` elements into its allocation.
struct NormView {
  DeviceTensor t;
  size_t shift = 0;
  NormView(size_t n, DType d, bool misalign) : t(n + 1, d), shift(misalign ? 1 : 0) {}
  void* ptr() const { return static_cast<char*>(t.data()) + shift * dtype_size(t.dtype()); }
  void upload(const std::vector<float>& v) { t.upload(v, shift); }
  std::vector<float> download(size_t n) const { return t.download(shift, n); }
};

cudaError_t run_forward(const NormCase& c, const NormForwardArgs& a) {
  return c.rms ? rms_norm_forward(a, nullptr) : layer_norm_forward(a, nullptr);
}

cudaError_t run_backward(const NormCase& c, const NormBackwardArgs& a) {
  return c.rms ? rms_norm_backward(a, nullptr) : layer_norm_backward(a, nullptr);
}

class NormTest : public ::testing::TestWithParam<NormCase> {};

TEST_P(NormTest, ForwardAndBackwardMatchReferenceAndAreDeterministic) {
  DTRAIN_SKIP_WITHOUT_GPU();
  const NormCase c = GetParam();
  const size_t n = static_cast<size_t>(c.rows) * c.cols;
  const double eps = 1e-5;
  // x, y and dy in `io` (bf16 beside an fp32 stream when mixed).
  const DType io = c.mixed ? DType::kBFloat16 : c.act;
  const auto x = random_values(n, 1, io);
  const auto res = c.residual ? random_values(n, 2, c.act) : std::vector<float>{};
  const auto w = random_values(c.cols, 3, c.param, 0.2f, 1.f);
  const auto b = c.rms ? std::vector<float>{} : random_values(c.cols, 4, c.param, 0.2f);
  const auto dy = random_values(n, 5, io);
  const auto dres = c.residual ? random_values(n, 6, c.act) : std::vector<float>{};

  NormView x_d(n, io, c.misalign), dy_d(n, io, c.misalign), y(n, io, c.misalign);
  DeviceTensor res_d(n, c.act), res_out(n, c.act), w_d(w, c.param), b_d(c.cols, c.param), mean(c.rows, DType::kFloat32),
      rstd(c.rows, DType::kFloat32);
  x_d.upload(x);
  dy_d.upload(dy);
  if (c.residual) res_d.upload(res);
  if (!c.rms) b_d.upload(b);

  NormForwardArgs f;
  f.x = x_d.ptr();
  f.residual = c.residual ? res_d.data() : nullptr;
  f.weight = w_d.data();
  f.bias = c.rms ? nullptr : b_d.data();
  f.y = y.ptr();
  f.residual_out = res_out.data();
  f.mean = c.rms ? nullptr : mean.f32();
  f.rstd = rstd.f32();
  f.rows = c.rows;
  f.cols = c.cols;
  f.eps = static_cast<float>(eps);
  f.act_dtype = c.act;
  f.param_dtype = c.param;
  f.bf16_x = f.bf16_y = c.mixed;
  DTRAIN_CUDA_OK(run_forward(c, f));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());

  const auto ref = reference::norm_forward(c.rms, x, res, w, b, c.rows, c.cols, eps, c.act);
  const auto h = res_out.download();
  std::vector<double> h_ref(ref.h.begin(), ref.h.end());
  EXPECT_TRUE(all_close(h, h_ref, rtol_for(c.act))) << "residual_out";
  EXPECT_TRUE(all_close(y.download(n), ref.y, rtol_for(io))) << "y";
  // Statistics are fp32 from the same inputs: judged against the row's scale.
  std::vector<double> row_scale(c.rows);
  for (int64_t r = 0; r < c.rows; ++r) row_scale[r] = 1.0 / ref.rstd[r];
  if (!c.rms) {
    EXPECT_TRUE(all_close(mean.download(), ref.mean, 1e-5, &row_scale)) << "mean";
  }
  EXPECT_TRUE(all_close(rstd.download(), ref.rstd, 1e-5)) << "rstd";

  // With y_amax_bits: the same y bits, and max |y| as stored beside it.
  {
    NormView y2(n, io, c.misalign);
    DeviceTensor res_out2(n, c.act);
    y2.t.fill_nan();
    DeviceAmax amax;
    NormForwardArgs f2 = f;
    f2.y = y2.ptr();
    f2.residual_out = res_out2.data();
    f2.y_amax_bits = amax.data();
    DTRAIN_CUDA_OK(run_forward(c, f2));
    DTRAIN_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> y_stored = y.download(n);
    EXPECT_EQ(y2.download(n), y_stored) << "y with y_amax_bits";
    EXPECT_TRUE(same_amax(amax.bits(), amax_bits_of(y_stored))) << "y_amax_bits";
  }

  // Backward, from what forward stored.
  const size_t ws_bytes = norm_backward_workspace_size(c.rows, c.cols);
  DeviceBytes ws(ws_bytes);
  DeviceTensor dres_d(n, c.act), dw(c.cols, c.param), db(c.cols, c.param);
  NormView dx(n, c.act, c.misalign), dx_bf16(n, DType::kBFloat16, c.misalign);
  if (c.residual) dres_d.upload(dres);
  NormBackwardArgs g;
  g.dy = dy_d.ptr();
  g.x = res_out.data();
  g.weight = w_d.data();
  g.mean = c.rms ? nullptr : mean.f32();
  g.rstd = rstd.f32();
  g.dresidual = c.residual ? dres_d.data() : nullptr;
  g.dx = dx.ptr();
  g.dweight = dw.data();
  g.dbias = c.rms ? nullptr : db.data();
  g.workspace = ws.data();
  g.workspace_bytes = ws_bytes;
  g.rows = c.rows;
  g.cols = c.cols;
  g.act_dtype = c.act;
  g.param_dtype = c.param;
  g.bf16_dy = c.mixed;
  g.dx_bf16 = c.mixed ? dx_bf16.ptr() : nullptr;
  DTRAIN_CUDA_OK(run_backward(c, g));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());

  const auto bref = reference::norm_backward(c.rms, dy, h, w, dres, c.rows, c.cols, eps);
  EXPECT_TRUE(all_close(dx.download(n), bref.dx, rtol_for(c.act))) << "dx";
  if (c.mixed) {
    EXPECT_TRUE(all_close(dx_bf16.download(n), bref.dx, rtol_for(DType::kBFloat16))) << "dx as bf16";
  }
  EXPECT_TRUE(all_close(dw.download(), bref.dweight, rtol_for(c.param), &bref.dweight_abs)) << "dweight";
  if (!c.rms) {
    EXPECT_TRUE(all_close(db.download(), bref.dbias, rtol_for(c.param), &bref.dbias_abs)) << "dbias";
  }

  // Deterministic: a second run into poisoned buffers gives the same bits.
  const auto dx1 = dx.t.bytes(), dw1 = dw.bytes(), db1 = db.bytes();
  dx.t.fill_nan();
  dw.fill_nan();
  db.fill_nan();
  DTRAIN_CUDA_OK(run_backward(c, g));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(dx.t.bytes(), dx1);
  EXPECT_EQ(dw.bytes(), dw1);
  EXPECT_EQ(db.bytes(), db1);
}

std::vector<NormCase> norm_cases() {
  std::vector<NormCase> out;
  const std::pair<DType, DType> types[] = {
      {DType::kFloat32, DType::kFloat32}, {DType::kBFloat16, DType::kBFloat16}, {DType::kBFloat16, DType::kFloat32}};
  for (bool rms : {false, true}) {
    for (auto [act, param] : types) {
      for (int cols : {64, 768, 1600, 2048, 4096}) out.push_back({rms, act, param, 333, cols});
    }
    out.push_back({rms, DType::kBFloat16, DType::kBFloat16, 1, 768});
    out.push_back({rms, DType::kBFloat16, DType::kBFloat16, 4100, 4096});
    out.push_back({rms, DType::kFloat32, DType::kFloat32, 1000, 768, false});
    out.push_back({rms, DType::kBFloat16, DType::kBFloat16, 257, 2048, false});
    out.push_back({rms, DType::kBFloat16, DType::kBFloat16, 37, 8192});
    out.push_back({rms, DType::kFloat32, DType::kFloat32, 37, 8192});
    out.push_back({rms, DType::kBFloat16, DType::kBFloat16, 37, 16384});
    out.push_back({rms, DType::kBFloat16, DType::kBFloat16, 129, 771});  // odd cols: scalar path
    out.push_back({rms, DType::kFloat32, DType::kFloat32, 129, 4001});
    out.push_back({rms, DType::kBFloat16, DType::kFloat32, 100, 768, true, true});
    out.push_back({rms, DType::kFloat32, DType::kFloat32, 100, 1600, true, true});
    // Autocast's layout: fp32 stream, bf16 update, output and gradient.
    for (int cols : {768, 2048}) out.push_back({rms, DType::kFloat32, DType::kFloat32, 333, cols, true, false, true});
    out.push_back({rms, DType::kFloat32, DType::kFloat32, 333, 768, false, false, true});
    out.push_back({rms, DType::kFloat32, DType::kFloat32, 129, 4001, true, false, true});  // scalar path
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, NormTest, ::testing::ValuesIn(norm_cases()), normCaseName);

TEST(NormKernels, AccumulatesParameterGradientsAndCapturesIntoAGraph) {
  DTRAIN_SKIP_WITHOUT_GPU();
  const int64_t rows = 513;
  const int cols = 768;
  const size_t n = rows * cols;
  const DType act = DType::kBFloat16, param = DType::kFloat32;
  const auto x = random_values(n, 11, act), dy = random_values(n, 12, act);
  const auto w = random_values(cols, 13, param, 0.2f, 1.f), b = random_values(cols, 14, param);
  const auto prior = random_values(cols, 15, param);
  DeviceTensor x_d(x, act), dy_d(dy, act), w_d(w, param), b_d(b, param), y(n, act), mean(rows, DType::kFloat32),
      rstd(rows, DType::kFloat32), dx(n, act), dw(prior, param), db(prior, param);
  const size_t ws_bytes = norm_backward_workspace_size(rows, cols);
  DeviceBytes ws(ws_bytes);
  NormForwardArgs f;
  f.x = x_d.data();
  f.weight = w_d.data();
  f.bias = b_d.data();
  f.y = y.data();
  f.mean = mean.f32();
  f.rstd = rstd.f32();
  f.rows = rows;
  f.cols = cols;
  f.act_dtype = act;
  f.param_dtype = param;
  NormBackwardArgs g;
  g.dy = dy_d.data();
  g.x = x_d.data();
  g.weight = w_d.data();
  g.mean = mean.f32();
  g.rstd = rstd.f32();
  g.dx = dx.data();
  g.dweight = dw.data();
  g.dbias = db.data();
  g.accumulate = true;
  g.workspace = ws.data();
  g.workspace_bytes = ws_bytes;
  g.rows = rows;
  g.cols = cols;
  g.act_dtype = act;
  g.param_dtype = param;

  cudaStream_t stream;
  DTRAIN_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  DTRAIN_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  ASSERT_EQ(layer_norm_forward(f, stream), cudaSuccess);
  ASSERT_EQ(layer_norm_backward(g, stream), cudaSuccess);
  DTRAIN_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  DTRAIN_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  DTRAIN_CUDA_OK(cudaGraphLaunch(exec, stream));  // replays accumulate: prior + 2 * grad
  DTRAIN_CUDA_OK(cudaGraphLaunch(exec, stream));
  DTRAIN_CUDA_OK(cudaStreamSynchronize(stream));

  const auto ref = reference::norm_backward(false, dy, x, w, {}, rows, cols, 1e-5);
  std::vector<double> dw_ref(cols), db_ref(cols), dw_scale(cols), db_scale(cols);
  for (int c = 0; c < cols; ++c) {
    dw_ref[c] = prior[c] + 2 * ref.dweight[c];
    db_ref[c] = prior[c] + 2 * ref.dbias[c];
    dw_scale[c] = std::fabs(prior[c]) + 2 * ref.dweight_abs[c];
    db_scale[c] = std::fabs(prior[c]) + 2 * ref.dbias_abs[c];
  }
  EXPECT_TRUE(all_close(dw.download(), dw_ref, kRtolF32, &dw_scale));
  EXPECT_TRUE(all_close(db.download(), db_ref, kRtolF32, &db_scale));
  EXPECT_TRUE(all_close(dx.download(), ref.dx, kRtolBF16));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// Argument checks return before anything is enqueued: these run without a GPU.
TEST(NormKernels, RejectsBadArgumentsWithoutTouchingTheDevice) {
  void* p = reinterpret_cast<void*>(0x10000);
  float* fp = reinterpret_cast<float*>(0x10000);
  NormForwardArgs f;
  f.x = p;
  f.y = p;
  f.weight = p;
  f.rows = 4;
  f.cols = 768;
  f.bias = p;
  EXPECT_EQ(rms_norm_forward(f, nullptr), cudaErrorInvalidValue);  // RMSNorm has no bias
  f.bias = nullptr;
  f.act_dtype = DType::kFloat32;
  f.param_dtype = DType::kBFloat16;
  EXPECT_EQ(layer_norm_forward(f, nullptr), cudaErrorInvalidValue);  // unsupported dtype pair
  f.param_dtype = DType::kFloat32;
  f.cols = 16384 + 8;
  EXPECT_EQ(layer_norm_forward(f, nullptr), cudaErrorInvalidValue);  // row too long
  f.rows = 0;
  f.cols = 768;
  EXPECT_EQ(layer_norm_forward(f, nullptr), cudaSuccess);  // nothing to do

  NormBackwardArgs g;
  g.dy = g.x = g.weight = p;
  g.dx = p;
  g.mean = g.rstd = fp;
  g.dweight = p;
  g.rows = 100;
  g.cols = 768;
  g.workspace = p;
  g.workspace_bytes = norm_backward_workspace_size(100, 768) - 1;
  EXPECT_EQ(layer_norm_backward(g, nullptr), cudaErrorInvalidValue);  // workspace too small
  g.workspace_bytes += 1;
  g.workspace = static_cast<char*>(p) + 4;
  EXPECT_EQ(layer_norm_backward(g, nullptr), cudaErrorInvalidValue);  // workspace misaligned
  g.mean = nullptr;
  g.workspace = p;
  EXPECT_EQ(layer_norm_backward(g, nullptr), cudaErrorInvalidValue);  // LayerNorm needs mean
}

TEST(NormKernels, WorkspaceDependsOnTheShapeOnly) {
  EXPECT_EQ(norm_backward_workspace_size(0, 768), 0u);
  EXPECT_EQ(norm_backward_workspace_size(3, 768), 3u * 2 * 768 * 4);
  EXPECT_EQ(norm_backward_workspace_size(16384, 768), norm_backward_workspace_size(1 << 20, 768));
  EXPECT_LE(norm_backward_workspace_size(16384, 4096), size_t{32} << 20);  // small next to the activations
}

}  // namespace
}  // namespace dtrain::kernels::testing
