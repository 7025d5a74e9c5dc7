// Batch norm (+ residual add) (+ ReLU) over channels-last rows against the
// CPU reference: training and eval forward, backward, determinism, graph
// capture, and the argument checks.
#include "models/kernels/batch_norm.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "kernel_reference.h"
#include "kernel_test_util.h"

namespace dtrain::kernels::testing {
namespace {

// Tolerances (relative, all_close's form):
// - y, dx, dresidual: kRtolF32 (1e-5) for fp32, kRtolBF16 (1e-2) for bf16
//   outputs (one rounding to bf16 is 2^-9); dx is judged against the scale
//   of its terms (the sums over all rows enter every element).
// - mean (against the channel's std), invstd and the running statistics:
//   2e-5: fp32 sums over thousands of rows, in another order than the
//   reference's double ones.
// - dweight, dbias: rtol of the parameter dtype (fp32) against the sum of
//   |terms|.
constexpr double kStatsRtol = 2e-5;

struct BnCase {
  DType act;
  int64_t rows;
  int channels;
  bool residual = false;
  bool relu = false;
  bool training = true;
  bool misalign = false;  // x, y, residual, dy, dx one element past a 16-byte boundary: the scalar path
  float offset = 0.f;     // added to x: a mean far from zero next to the spread
};

std::string bnCaseName(const ::testing::TestParamInfo<BnCase>& info) {
  const BnCase& c = info.param;
  const int offset_value = static_cast<int>(c.offset);
  const std::string offset = (offset_value < 0 ? "m" : "") + std::to_string(std::abs(offset_value));
  return std::string(dtype_name(c.act)) + "_r" + std::to_string(c.rows) + "_c" + std::to_string(c.channels) +
         (c.residual ? "_res" : "") + (c.relu ? "_relu" : "") + (c.training ? "_train" : "_eval") +
         (c.misalign ? "_misaligned" : "") + (c.offset != 0.f ? "_offset" + offset : "");
}

// A tensor whose data starts `shift` elements into its allocation.
struct View {
  DeviceTensor t;
  size_t shift = 0;
  View(size_t n, DType d, bool misalign) : t(n + 1, d), shift(misalign ? 1 : 0) {}
  void* ptr() const { return static_cast<char*>(t.data()) + shift * dtype_size(t.dtype()); }
  void upload(const std::vector<float>& v) { t.upload(v, shift); }
  std::vector<float> download(size_t n) const { return t.download(shift, n); }
};

class BatchNormTest : public ::testing::TestWithParam<BnCase> {};

TEST_P(BatchNormTest, ForwardAndBackwardMatchReferenceAndAreDeterministic) {
  DTRAIN_SKIP_WITHOUT_GPU();
  const BnCase c = GetParam();
  const size_t n = static_cast<size_t>(c.rows) * c.channels;
  const double eps = 1e-5, momentum = 0.1;
  const DType f32 = DType::kFloat32;
  const auto x = random_values(n, 1, c.act, 1.5f, c.offset);
  const auto res = c.residual ? random_values(n, 2, c.act) : std::vector<float>{};
  const auto w = random_values(c.channels, 3, f32, 0.2f, 1.f);
  const auto b = random_values(c.channels, 4, f32, 0.2f);
  const auto rm = random_values(c.channels, 5, f32, 0.5f);
  const auto rv = random_values(c.channels, 6, f32, 0.1f, 1.f);
  const auto dy = random_values(n, 7, c.act);

  View x_d(n, c.act, c.misalign), res_d(n, c.act, c.misalign), y(n, c.act, c.misalign), dy_d(n, c.act, c.misalign);
  DeviceTensor w_d(w, f32), b_d(b, f32), rm_d(rm, f32), rv_d(rv, f32), save_mean(c.channels, f32),
      save_invstd(c.channels, f32);
  x_d.upload(x);
  dy_d.upload(dy);
  if (c.residual) res_d.upload(res);
  const size_t ws_bytes = batch_norm_workspace_size(c.rows, c.channels);
  DeviceBytes ws(ws_bytes);

  BatchNormForwardArgs f;
  f.x = x_d.ptr();
  f.residual = c.residual ? res_d.ptr() : nullptr;
  f.weight = w_d.f32();
  f.bias = b_d.f32();
  f.y = y.ptr();
  f.running_mean = rm_d.f32();
  f.running_var = rv_d.f32();
  f.save_mean = save_mean.f32();
  f.save_invstd = save_invstd.f32();
  f.workspace = ws.data();
  f.workspace_bytes = ws_bytes;
  f.rows = c.rows;
  f.channels = c.channels;
  f.eps = static_cast<float>(eps);
  f.momentum = static_cast<float>(momentum);
  f.training = c.training;
  f.relu = c.relu;
  f.act_dtype = c.act;
  DTRAIN_CUDA_OK(batch_norm_forward(f, nullptr));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());

  const auto ref =
      reference::batch_norm_forward(x, res, w, b, rm, rv, c.rows, c.channels, c.training, momentum, eps, c.relu);
  // An fp32 mean near `offset` is only as exact as fp32 at |offset| (2^-24
  // relative per rounding): x - mean, hence y, carries that absolute error
  // against the exact statistics, scaled by invstd. y's tolerance allows for
  // it (|offset| x rtol is ~170 roundings at 1000); bf16 outputs round far
  // more than that anyway.
  const double shift = c.act == f32 ? std::fabs(c.offset) : 0.0;
  std::vector<double> y_scale(n);
  for (size_t i = 0; i < n; ++i) {
    const int ch = static_cast<int>(i % c.channels);
    y_scale[i] = std::fabs(w[ch]) * ref.invstd[ch] * shift;
  }
  const auto y_got = y.download(n);
  EXPECT_TRUE(all_close(y_got, ref.y, rtol_for(c.act), &y_scale)) << "y";
  std::vector<double> std_scale(c.channels);
  for (int ch = 0; ch < c.channels; ++ch) std_scale[ch] = 1.0 / ref.invstd[ch];
  const auto mean_got = save_mean.download(), invstd_got = save_invstd.download();
  EXPECT_TRUE(all_close(mean_got, ref.mean, kStatsRtol, &std_scale)) << "saved mean";
  EXPECT_TRUE(all_close(invstd_got, ref.invstd, kStatsRtol)) << "saved invstd";
  EXPECT_TRUE(all_close(rm_d.download(), ref.running_mean, kStatsRtol, &std_scale)) << "running mean";
  EXPECT_TRUE(all_close(rv_d.download(), ref.running_var, kStatsRtol)) << "running var";

  // Backward from what forward wrote and saved.
  View dx(n, c.act, c.misalign), dres(n, c.act, c.misalign);
  DeviceTensor dw(c.channels, f32), db(c.channels, f32);
  BatchNormBackwardArgs g;
  g.dy = dy_d.ptr();
  g.y = y.ptr();
  g.x = x_d.ptr();
  g.weight = w_d.f32();
  g.mean = save_mean.f32();
  g.invstd = save_invstd.f32();
  g.dx = dx.ptr();
  g.dresidual = c.residual ? dres.ptr() : nullptr;
  g.dweight = dw.f32();
  g.dbias = db.f32();
  g.workspace = ws.data();
  g.workspace_bytes = ws_bytes;
  g.rows = c.rows;
  g.channels = c.channels;
  g.training = c.training;
  g.relu = c.relu;
  g.act_dtype = c.act;
  DTRAIN_CUDA_OK(batch_norm_backward(g, nullptr));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());

  const auto bref =
      reference::batch_norm_backward(dy, y_got, x, w, mean_got, invstd_got, c.rows, c.channels, c.training, c.relu);
  // The reference takes the saved statistics, as the kernel: x - mean is
  // then exact in fp32 too (Sterbenz), whatever the offset.
  EXPECT_TRUE(all_close(dx.download(n), bref.dx, rtol_for(c.act), &bref.dx_scale)) << "dx";
  if (c.residual) {
    EXPECT_TRUE(all_close(dres.download(n), bref.dresidual, rtol_for(c.act))) << "dresidual";
  }
  EXPECT_TRUE(all_close(dw.download(), bref.dweight, kRtolF32, &bref.dweight_abs)) << "dweight";
  EXPECT_TRUE(all_close(db.download(), bref.dbias, kRtolF32, &bref.dbias_abs)) << "dbias";

  // Deterministic: again from the same running statistics, into poisoned
  // buffers, the same bits.
  const auto y1 = y.t.bytes(), mean1 = save_mean.bytes(), invstd1 = save_invstd.bytes(), rm1 = rm_d.bytes(),
             rv1 = rv_d.bytes(), dx1 = dx.t.bytes(), dres1 = dres.t.bytes(), dw1 = dw.bytes(), db1 = db.bytes();
  rm_d.upload(rm);
  rv_d.upload(rv);
  for (DeviceTensor* t : {&y.t, &save_mean, &save_invstd, &dx.t, &dres.t, &dw, &db}) t->fill_nan();
  DTRAIN_CUDA_OK(batch_norm_forward(f, nullptr));
  DTRAIN_CUDA_OK(batch_norm_backward(g, nullptr));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(y.t.bytes(), y1);
  EXPECT_EQ(save_mean.bytes(), mean1);
  EXPECT_EQ(save_invstd.bytes(), invstd1);
  EXPECT_EQ(rm_d.bytes(), rm1);
  EXPECT_EQ(rv_d.bytes(), rv1);
  EXPECT_EQ(dx.t.bytes(), dx1);
  if (c.residual) {
    EXPECT_EQ(dres.t.bytes(), dres1);
  }
  EXPECT_EQ(dw.bytes(), dw1);
  EXPECT_EQ(db.bytes(), db1);

  // Without a residual, ReLU's mask recomputed from x and the bias (y not
  // given) is the mask y > 0: the same bits.
  if (c.relu && !c.residual) {
    for (DeviceTensor* t : {&dx.t, &dw, &db}) t->fill_nan();
    g.y = nullptr;
    g.bias = b_d.f32();
    DTRAIN_CUDA_OK(batch_norm_backward(g, nullptr));
    DTRAIN_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(dx.t.bytes(), dx1) << "dx, mask from x";
    EXPECT_EQ(dw.bytes(), dw1) << "dweight, mask from x";
    EXPECT_EQ(db.bytes(), db1) << "dbias, mask from x";
  }
}

std::vector<BnCase> bn_cases() {
  std::vector<BnCase> out;
  // ResNet-50 shapes at batch 2 (rows = N*H*W): the stem/layer1 (56x56x64),
  // layer1's expansion (56x56x256 at batch 1), layer3, layer4 (7x7x2048),
  // and 128 x 7 x 7 x 512 (layer4's inner width at batch 128).
  const std::pair<int64_t, int> shapes[] = {{2 * 56 * 56, 64}, {56 * 56, 256}, {2 * 14 * 14, 1024},
                                            {2 * 7 * 7, 2048}, {128 * 7 * 7, 512}};
  for (DType act : {DType::kFloat32, DType::kBFloat16}) {
    for (auto [rows, channels] : shapes) {
      out.push_back({act, rows, channels});                     // downsample: BN alone
      out.push_back({act, rows, channels, false, true});        // BN + ReLU
      out.push_back({act, rows, channels, true, true});         // BN + shortcut + ReLU
    }
    out.push_back({act, 6272, 64, true, false});                // residual without ReLU
    for (bool relu : {false, true}) {
      out.push_back({act, 6272, 64, true, relu, false});        // eval
      out.push_back({act, 98, 2048, false, relu, false});
      out.push_back({act, 1, 64, true, relu, false});           // eval of one row
      out.push_back({act, 2, 64, true, relu});                  // the fewest rows training takes
      out.push_back({act, 1000, 3, true, relu});                // odd channel counts: scalar path
      out.push_back({act, 777, 37, true, relu});
      out.push_back({act, 777, 37, true, relu, false});
      out.push_back({act, 1568, 512, true, relu, true, true});  // misaligned: scalar path
    }
  }
  // A mean far from zero next to its spread: E[x^2] - E[x]^2 would lose it.
  out.push_back({DType::kFloat32, 6272, 64, false, true, true, false, 1000.f});
  out.push_back({DType::kFloat32, 4096, 40, true, false, true, false, -300.f});
  out.push_back({DType::kBFloat16, 6272, 64, false, true, true, false, 100.f});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormTest, ::testing::ValuesIn(bn_cases()), bnCaseName);

// A training forward + backward captured into a graph and replayed twice:
// the same outputs, and the running statistics updated twice.
TEST(BatchNormKernels, CapturesIntoAGraph) {
  DTRAIN_SKIP_WITHOUT_GPU();
  const int64_t rows = 2 * 28 * 28;
  const int channels = 512;
  const size_t n = rows * channels;
  const DType act = DType::kBFloat16, f32 = DType::kFloat32;
  const double momentum = 0.1, eps = 1e-5;
  const auto x = random_values(n, 21, act), res = random_values(n, 22, act), dy = random_values(n, 23, act);
  const auto w = random_values(channels, 24, f32, 0.2f, 1.f), b = random_values(channels, 25, f32, 0.2f);
  const auto rm = random_values(channels, 26, f32, 0.5f), rv = random_values(channels, 27, f32, 0.1f, 1.f);
  DeviceTensor x_d(x, act), res_d(res, act), dy_d(dy, act), y(n, act), dx(n, act), dres(n, act), w_d(w, f32),
      b_d(b, f32), rm_d(rm, f32), rv_d(rv, f32), mean(channels, f32), invstd(channels, f32), dw(channels, f32),
      db(channels, f32);
  const size_t ws_bytes = batch_norm_workspace_size(rows, channels);
  DeviceBytes ws(ws_bytes);
  BatchNormForwardArgs f;
  f.x = x_d.data();
  f.residual = res_d.data();
  f.weight = w_d.f32();
  f.bias = b_d.f32();
  f.y = y.data();
  f.running_mean = rm_d.f32();
  f.running_var = rv_d.f32();
  f.save_mean = mean.f32();
  f.save_invstd = invstd.f32();
  f.workspace = ws.data();
  f.workspace_bytes = ws_bytes;
  f.rows = rows;
  f.channels = channels;
  f.relu = true;
  f.act_dtype = act;
  BatchNormBackwardArgs g;
  g.dy = dy_d.data();
  g.y = y.data();
  g.x = x_d.data();
  g.weight = w_d.f32();
  g.mean = mean.f32();
  g.invstd = invstd.f32();
  g.dx = dx.data();
  g.dresidual = dres.data();
  g.dweight = dw.f32();
  g.dbias = db.f32();
  g.workspace = ws.data();
  g.workspace_bytes = ws_bytes;
  g.rows = rows;
  g.channels = channels;
  g.relu = true;
  g.act_dtype = act;

  cudaStream_t stream;
  DTRAIN_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  DTRAIN_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  ASSERT_EQ(batch_norm_forward(f, stream), cudaSuccess);
  ASSERT_EQ(batch_norm_backward(g, stream), cudaSuccess);
  DTRAIN_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  DTRAIN_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  DTRAIN_CUDA_OK(cudaGraphLaunch(exec, stream));
  DTRAIN_CUDA_OK(cudaGraphLaunch(exec, stream));
  DTRAIN_CUDA_OK(cudaStreamSynchronize(stream));

  const auto ref = reference::batch_norm_forward(x, res, w, b, rm, rv, rows, channels, true, momentum, eps, true);
  const auto y_got = y.download();
  EXPECT_TRUE(all_close(y_got, ref.y, kRtolBF16)) << "y";
  std::vector<double> rm2(channels), rv2(channels), std_scale(channels);
  for (int c = 0; c < channels; ++c) {
    // The second replay starts from the first one's running statistics.
    rm2[c] = (1 - momentum) * ref.running_mean[c] + momentum * ref.mean[c];
    rv2[c] = (1 - momentum) * ref.running_var[c] + (ref.running_var[c] - (1 - momentum) * rv[c]);
    std_scale[c] = 1.0 / ref.invstd[c];
  }
  EXPECT_TRUE(all_close(rm_d.download(), rm2, kStatsRtol, &std_scale)) << "running mean after two replays";
  EXPECT_TRUE(all_close(rv_d.download(), rv2, kStatsRtol)) << "running var after two replays";
  const auto bref = reference::batch_norm_backward(dy, y_got, x, w, mean.download(), invstd.download(), rows,
                                                   channels, true, true);
  EXPECT_TRUE(all_close(dx.download(), bref.dx, kRtolBF16, &bref.dx_scale)) << "dx";
  EXPECT_TRUE(all_close(dres.download(), bref.dresidual, kRtolBF16)) << "dresidual";
  EXPECT_TRUE(all_close(dw.download(), bref.dweight, kRtolF32, &bref.dweight_abs)) << "dweight";
  EXPECT_TRUE(all_close(db.download(), bref.dbias, kRtolF32, &bref.dbias_abs)) << "dbias";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// Argument checks return before anything is enqueued: these run without a GPU.
TEST(BatchNormKernels, RejectsBadArgumentsWithoutTouchingTheDevice) {
  void* p = reinterpret_cast<void*>(0x10000);
  float* fp = reinterpret_cast<float*>(0x10000);
  BatchNormForwardArgs f;
  f.x = f.y = p;
  f.weight = f.bias = fp;
  f.running_mean = f.running_var = fp;
  f.save_mean = f.save_invstd = fp;
  f.workspace = p;
  f.channels = 64;
  f.rows = 1;
  f.workspace_bytes = batch_norm_workspace_size(2, 64);
  EXPECT_EQ(batch_norm_forward(f, nullptr), cudaErrorInvalidValue);  // training over one row
  f.rows = 100;
  f.workspace_bytes = batch_norm_workspace_size(100, 64) - 1;
  EXPECT_EQ(batch_norm_forward(f, nullptr), cudaErrorInvalidValue);  // workspace too small
  f.workspace_bytes += 1;
  f.workspace = static_cast<char*>(p) + 4;
  EXPECT_EQ(batch_norm_forward(f, nullptr), cudaErrorInvalidValue);  // workspace misaligned
  f.workspace = p;
  f.save_invstd = nullptr;
  EXPECT_EQ(batch_norm_forward(f, nullptr), cudaErrorInvalidValue);  // training saves both statistics
  f.training = false;
  f.running_var = nullptr;
  f.save_mean = nullptr;
  EXPECT_EQ(batch_norm_forward(f, nullptr), cudaErrorInvalidValue);  // eval reads the running statistics
  f.running_var = fp;
  f.rows = 0;
  EXPECT_EQ(batch_norm_forward(f, nullptr), cudaSuccess);  // eval over no rows: nothing to do

  BatchNormBackwardArgs g;
  g.dy = g.x = p;
  g.dx = p;
  g.weight = g.mean = g.invstd = fp;
  g.dweight = g.dbias = fp;
  g.workspace = p;
  g.rows = 100;
  g.channels = 64;
  g.workspace_bytes = batch_norm_workspace_size(100, 64);
  g.relu = true;
  EXPECT_EQ(batch_norm_backward(g, nullptr), cudaErrorInvalidValue);  // ReLU's mask needs y or the bias
  g.relu = false;
  g.dbias = nullptr;
  EXPECT_EQ(batch_norm_backward(g, nullptr), cudaErrorInvalidValue);  // dx needs both sums
  g.dbias = fp;
  g.rows = 1;
  EXPECT_EQ(batch_norm_backward(g, nullptr), cudaErrorInvalidValue);  // training over one row
}

TEST(BatchNormKernels, WorkspaceDependsOnTheShapeOnly) {
  EXPECT_EQ(batch_norm_workspace_size(0, 64), 0u);
  EXPECT_GT(batch_norm_workspace_size(2, 3), 0u);
  EXPECT_EQ(batch_norm_workspace_size(128 * 56 * 56, 64), batch_norm_workspace_size(1 << 24, 64));
  EXPECT_LE(batch_norm_workspace_size(128 * 7 * 7, 2048), size_t{16} << 20);  // small next to the activations
}

}  // namespace
}  // namespace dtrain::kernels::testing
