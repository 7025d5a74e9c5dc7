// The fused AdamW step and the squared norm against CPU references.
#include "models/kernels/optimizer.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_util.h"

namespace dtrain::kernels::testing {
namespace {

struct AdamWHyper {
  double lr = 1e-2, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.1;
};

struct AdamWState {
  std::vector<float> param, exp_avg, exp_avg_sq;
};

// torch.optim.AdamW's arithmetic in fp32, one operation at a time.
void reference_step(AdamWState& s, const std::vector<float>& grad, const AdamWHyper& h, float lr, float step,
                    float grad_scale) {
  const float one_minus_beta1 = static_cast<float>(1.0 - h.beta1), one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  const float step_size = lr / (1.f - std::pow(static_cast<float>(h.beta1), step));
  const float bias_correction2_sqrt = std::sqrt(1.f - std::pow(static_cast<float>(h.beta2), step));
  const float decay = 1.f - lr * static_cast<float>(h.weight_decay);
  for (size_t i = 0; i < grad.size(); ++i) {
    const float g = grad[i] * grad_scale;
    float p = s.param[i], m = s.exp_avg[i], v = s.exp_avg_sq[i];
    if (h.weight_decay != 0) p *= decay;
    m = m + one_minus_beta1 * (g - m);
    v = v * static_cast<float>(h.beta2) + one_minus_beta2 * g * g;
    const float denom = std::sqrt(v) / bias_correction2_sqrt + static_cast<float>(h.eps);
    s.param[i] = p - step_size * (m / denom);
    s.exp_avg[i] = m;
    s.exp_avg_sq[i] = v;
  }
}

std::vector<double> widen(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// The slab's buffers on the device, `offset` elements into their
// allocations (offset 1: the scalar path).
struct DeviceSlab {
  DeviceSlab(const AdamWState& s, const std::vector<float>& grad, size_t offset)
      : offset(offset),
        param(grad.size() + offset, DType::kFloat32),
        grad_d(grad.size() + offset, DType::kFloat32),
        exp_avg(grad.size() + offset, DType::kFloat32),
        exp_avg_sq(grad.size() + offset, DType::kFloat32),
        lr(1, DType::kFloat32),
        step(1, DType::kFloat32),
        scale(1, DType::kFloat32) {
    param.upload(s.param, offset);
    grad_d.upload(grad, offset);
    exp_avg.upload(s.exp_avg, offset);
    exp_avg_sq.upload(s.exp_avg_sq, offset);
  }
  AdamWArgs args(const AdamWHyper& h, bool scaled) const {
    AdamWArgs a;
    a.param = param.f32() + offset;
    a.grad = grad_d.f32() + offset;
    a.exp_avg = exp_avg.f32() + offset;
    a.exp_avg_sq = exp_avg_sq.f32() + offset;
    a.n = static_cast<int64_t>(param.count() - offset);
    a.lr = lr.f32();
    a.step = step.f32();
    a.grad_scale = scaled ? scale.f32() : nullptr;
    a.beta1 = h.beta1;
    a.beta2 = h.beta2;
    a.eps = h.eps;
    a.weight_decay = h.weight_decay;
    return a;
  }
  size_t offset;
  DeviceTensor param, grad_d, exp_avg, exp_avg_sq, lr, step, scale;
};

struct AdamWCase {
  int64_t n;
  size_t offset;
  double weight_decay;
  bool scaled;
};

std::string adamw_name(const ::testing::TestParamInfo<AdamWCase>& info) {
  const AdamWCase& c = info.param;
  return "n" + std::to_string(c.n) + "_off" + std::to_string(c.offset) + (c.weight_decay != 0 ? "_decay" : "") +
         (c.scaled ? "_scaled" : "");
}

class AdamWTest : public ::testing::TestWithParam<AdamWCase> {};

TEST_P(AdamWTest, ThreeStepsMatchTheReference) {
  DTRAIN_SKIP_WITHOUT_GPU();
  const AdamWCase c = GetParam();
  AdamWHyper h;
  h.weight_decay = c.weight_decay;
  const size_t n = static_cast<size_t>(c.n);
  AdamWState s{random_values(n, 31, DType::kFloat32), random_values(n, 32, DType::kFloat32, 0.1f),
               random_values(n, 33, DType::kFloat32, 0.01f)};
  for (float& v : s.exp_avg_sq) v = v * v;  // a second moment is never negative
  const auto grad = random_values(n, 34, DType::kFloat32);
  DeviceSlab d(s, grad, c.offset);
  const float scale = c.scaled ? 0.5f : 1.f;
  d.scale.upload({scale});
  std::vector<float> before;
  for (int step = 1; step <= 3; ++step) {
    const float lr = static_cast<float>(h.lr) / step;  // a schedule: the kernel reads it every step
    d.lr.upload({lr});
    d.step.upload({static_cast<float>(step)});
    before = s.param;
    DTRAIN_CUDA_OK(adamw_step(d.args(h, c.scaled), nullptr));
    reference_step(s, grad, h, lr, static_cast<float>(step), scale);
  }
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());
  const auto param = d.param.download(c.offset);
  EXPECT_TRUE(all_close(param, widen(s.param), kRtolF32)) << "param";
  EXPECT_TRUE(all_close(d.exp_avg.download(c.offset), widen(s.exp_avg), kRtolF32)) << "exp_avg";
  EXPECT_TRUE(all_close(d.exp_avg_sq.download(c.offset), widen(s.exp_avg_sq), kRtolF32)) << "exp_avg_sq";
  // The last update itself (small next to param), to a tolerance that
  // allows for the rounding of param.
  std::vector<float> update(n);
  std::vector<double> update_ref(n);
  for (size_t i = 0; i < n; ++i) {
    update[i] = param[i] - before[i];
    update_ref[i] = static_cast<double>(s.param[i]) - before[i];
  }
  EXPECT_TRUE(all_close(update, update_ref, 1e-3)) << "update";
}

std::vector<AdamWCase> adamw_cases() {
  std::vector<AdamWCase> out;
  for (int64_t n : {1, 7, 4096, 1000003}) {
    for (size_t offset : {0, 1}) out.push_back({n, offset, 0.1, false});
  }
  out.push_back({4099, 0, 0.0, false});
  out.push_back({4099, 0, 0.1, true});
  out.push_back({4099, 3, 0.0, true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Slabs, AdamWTest, ::testing::ValuesIn(adamw_cases()), adamw_name);

// The tiles cover the slab in order, each within one range or none, none
// longer than kAdamWTileElements; ranges out of order, overlapping or past
// the end give none. Host code: runs without a GPU.
TEST(AdamWTiles, CoverTheSlabAndSplitAtTheRanges) {
  const int64_t n = 100000;
  const std::vector<std::pair<int64_t, int64_t>> ranges{{10, 20}, {20, 40000}, {50001, 50002}, {99999, 100000}};
  const std::vector<AdamWTile> tiles = adamw_tiles(n, ranges);
  ASSERT_FALSE(tiles.empty());
  int64_t at = 0;
  for (const AdamWTile& t : tiles) {
    EXPECT_EQ(t.begin, at);
    EXPECT_GT(t.end, t.begin);
    EXPECT_LE(t.end - t.begin, kAdamWTileElements);
    if (t.range >= 0) {
      EXPECT_GE(t.begin, ranges[t.range].first);
      EXPECT_LE(t.end, ranges[t.range].second);
    } else {
      for (const auto& [b, e] : ranges) EXPECT_TRUE(t.end <= b || t.begin >= e) << "a tile of no range inside one";
    }
    at = t.end;
  }
  EXPECT_EQ(at, n);
  EXPECT_TRUE(adamw_tiles(n, {{20, 30}, {10, 15}}).empty()) << "out of order";
  EXPECT_TRUE(adamw_tiles(n, {{10, 30}, {20, 40}}).empty()) << "overlapping";
  EXPECT_TRUE(adamw_tiles(n, {{10, n + 1}}).empty()) << "past the end";
  EXPECT_EQ(adamw_tiles(0, {}).size(), 0u);
}

// A step by tiles writes the bits the plain step writes, and each range's
// maximum of |param| as written: a NaN gradient makes its range's NaN.
TEST(AdamWTiles, TheTiledStepIsThePlainStepAndKeepsEachRangesMaximum) {
  DTRAIN_SKIP_WITHOUT_GPU();
  for (const auto& [n, offset] : std::vector<std::pair<int64_t, size_t>>{{4099, 0}, {4099, 3}, {1000003, 0}}) {
    SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(offset));
    AdamWHyper h;
    const size_t count = static_cast<size_t>(n);
    AdamWState s{random_values(count, 41, DType::kFloat32), random_values(count, 42, DType::kFloat32, 0.1f),
                 random_values(count, 43, DType::kFloat32, 0.01f)};
    for (float& v : s.exp_avg_sq) v = v * v;
    std::vector<float> grad = random_values(count, 44, DType::kFloat32);
    // Ranges with unaligned ends, a long one, and one whose gradient has a NaN.
    std::vector<std::pair<int64_t, int64_t>> ranges{{1, 7}, {7, 1000}, {1003, n / 2}, {n / 2 + 5, n - 1}};
    grad[static_cast<size_t>(n / 2 + 9)] = std::nanf("");
    DeviceSlab plain(s, grad, offset), tiled(s, grad, offset);
    for (DeviceSlab* d : {&plain, &tiled}) {
      d->lr.upload({1e-2f});
      d->step.upload({1.f});
    }
    const std::vector<AdamWTile> tiles = adamw_tiles(n, ranges);
    DeviceBytes tiles_d(tiles.size() * sizeof(AdamWTile)), maxima_d(ranges.size() * sizeof(uint32_t));
    ASSERT_EQ(cudaMemcpy(tiles_d.data(), tiles.data(), tiles.size() * sizeof(AdamWTile), cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaMemset(maxima_d.data(), 0xff, ranges.size() * sizeof(uint32_t)), cudaSuccess);  // the call zeroes
    AdamWArgs a = tiled.args(h, false);
    a.tiles = static_cast<const AdamWTile*>(tiles_d.data());
    a.tile_count = static_cast<int64_t>(tiles.size());
    a.amax_bits = static_cast<uint32_t*>(maxima_d.data());
    a.ranges = static_cast<int64_t>(ranges.size());
    DTRAIN_CUDA_OK(adamw_step(plain.args(h, false), nullptr));
    DTRAIN_CUDA_OK(adamw_step(a, nullptr));
    DTRAIN_CUDA_OK(cudaDeviceSynchronize());
    const auto same_bits = [&](const DeviceTensor& x, const DeviceTensor& y) {
      const std::vector<float> u = x.download(offset), v = y.download(offset);
      return u.size() == v.size() && std::memcmp(u.data(), v.data(), u.size() * sizeof(float)) == 0;
    };
    EXPECT_TRUE(same_bits(tiled.param, plain.param)) << "param";
    EXPECT_TRUE(same_bits(tiled.exp_avg, plain.exp_avg)) << "exp_avg";
    EXPECT_TRUE(same_bits(tiled.exp_avg_sq, plain.exp_avg_sq)) << "exp_avg_sq";
    const std::vector<float> param = tiled.param.download(offset);
    std::vector<uint32_t> maxima(ranges.size());
    ASSERT_EQ(cudaMemcpy(maxima.data(), maxima_d.data(), maxima.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost),
              cudaSuccess);
    for (size_t r = 0; r < ranges.size(); ++r) {
      float want = 0;
      bool nan = false;
      for (int64_t i = ranges[r].first; i < ranges[r].second; ++i) {
        const float v = std::fabs(param[static_cast<size_t>(i)]);
        nan = nan || std::isnan(v);
        want = std::max(want, v);
      }
      float got;
      std::memcpy(&got, &maxima[r], sizeof got);
      if (nan) {
        EXPECT_TRUE(std::isnan(got)) << "range " << r << " holds a NaN";
      } else {
        EXPECT_EQ(got, want) << "range " << r;
      }
    }
  }
}

double reference_squared_norm(const std::vector<float>& x) {
  long double s = 0;
  for (float v : x) s += static_cast<long double>(v) * v;
  return static_cast<double>(s);
}

double download_double(const DeviceBytes& d) {
  double v = 0;
  EXPECT_EQ(cudaMemcpy(&v, d.data(), sizeof v, cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

TEST(SquaredNorm, MatchesTheReferenceAccumulatesAndIsDeterministic) {
  DTRAIN_SKIP_WITHOUT_GPU();
  for (int64_t n : {1, 5, 16384, 16385, 3000001}) {
    for (size_t offset : {0, 1}) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(offset));
      const auto x = random_values(static_cast<size_t>(n), 41, DType::kFloat32, 3.f);
      DeviceTensor x_d(static_cast<size_t>(n) + offset, DType::kFloat32);
      x_d.upload(x, offset);
      const size_t ws_bytes = squared_norm_workspace_size(n);
      DeviceBytes ws(ws_bytes), out(sizeof(double));
      double* out_p = static_cast<double*>(out.data());
      DTRAIN_CUDA_OK(squared_norm(out_p, false, x_d.f32() + offset, n, ws.data(), ws_bytes, nullptr));
      const double first = download_double(out);
      EXPECT_NEAR(first, reference_squared_norm(x), 1e-12 * first);
      DTRAIN_CUDA_OK(squared_norm(out_p, true, x_d.f32() + offset, n, ws.data(), ws_bytes, nullptr));
      EXPECT_EQ(download_double(out), first + first);  // the same bits twice, then added
    }
  }
}

TEST(SquaredNorm, AnEmptySlabIsZeroOrLeavesTheSumAsItIs) {
  DTRAIN_SKIP_WITHOUT_GPU();
  DeviceBytes out(sizeof(double));
  double* out_p = static_cast<double*>(out.data());
  const double prior = 2.5;
  DTRAIN_CUDA_OK(cudaMemcpy(out_p, &prior, sizeof prior, cudaMemcpyHostToDevice));
  DTRAIN_CUDA_OK(squared_norm(out_p, true, nullptr, 0, nullptr, 0, nullptr));
  EXPECT_EQ(download_double(out), prior);
  DTRAIN_CUDA_OK(squared_norm(out_p, false, nullptr, 0, nullptr, 0, nullptr));
  EXPECT_EQ(download_double(out), 0.0);
}

// Two replays of one captured clip-norm + AdamW step, with the lr and step
// count written on the device before each: as dtrain's CUDA-graph step.
TEST(OptimizerKernels, CaptureIntoAGraphAndReplayWithNewScalars) {
  DTRAIN_SKIP_WITHOUT_GPU();
  const size_t n = 10007;
  AdamWHyper h;
  AdamWState s{random_values(n, 51, DType::kFloat32), std::vector<float>(n, 0.f), std::vector<float>(n, 0.f)};
  const auto grad = random_values(n, 52, DType::kFloat32);
  DeviceSlab d(s, grad, 0);
  d.scale.upload({0.25f});
  const size_t ws_bytes = squared_norm_workspace_size(n);
  DeviceBytes ws(ws_bytes), norm(sizeof(double));
  cudaStream_t stream;
  DTRAIN_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  DTRAIN_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  ASSERT_EQ(squared_norm(static_cast<double*>(norm.data()), false, d.grad_d.f32(), n, ws.data(), ws_bytes, stream),
            cudaSuccess);
  ASSERT_EQ(adamw_step(d.args(h, true), stream), cudaSuccess);
  DTRAIN_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  DTRAIN_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int step = 1; step <= 2; ++step) {
    const float lr = 0.01f * step, step_f = static_cast<float>(step);
    DTRAIN_CUDA_OK(cudaMemcpyAsync(d.lr.data(), &lr, sizeof lr, cudaMemcpyHostToDevice, stream));
    DTRAIN_CUDA_OK(cudaMemcpyAsync(d.step.data(), &step_f, sizeof step_f, cudaMemcpyHostToDevice, stream));
    DTRAIN_CUDA_OK(cudaGraphLaunch(exec, stream));
    DTRAIN_CUDA_OK(cudaStreamSynchronize(stream));
    reference_step(s, grad, h, lr, step_f, 0.25f);
  }
  EXPECT_TRUE(all_close(d.param.download(), widen(s.param), kRtolF32));
  EXPECT_TRUE(all_close(d.exp_avg_sq.download(), widen(s.exp_avg_sq), kRtolF32));
  const double sq = download_double(norm);
  EXPECT_NEAR(sq, reference_squared_norm(grad), 1e-12 * sq);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// Argument checks return before anything is enqueued: these run without a GPU.
TEST(OptimizerKernels, RejectBadArgumentsWithoutTouchingTheDevice) {
  float* p = reinterpret_cast<float*>(0x10000);
  AdamWArgs a;
  a.param = a.exp_avg = a.exp_avg_sq = p;
  a.grad = p;
  a.n = 100;
  a.step = p;
  EXPECT_EQ(adamw_step(a, nullptr), cudaErrorInvalidValue);  // no lr
  a.lr = p;
  a.n = -1;
  EXPECT_EQ(adamw_step(a, nullptr), cudaErrorInvalidValue);
  a.n = 0;
  EXPECT_EQ(adamw_step(a, nullptr), cudaSuccess);  // nothing to do

  double* out = reinterpret_cast<double*>(0x10000);
  const size_t ws = squared_norm_workspace_size(100);
  EXPECT_EQ(squared_norm(out, false, p, 100, p, ws - 1, nullptr), cudaErrorInvalidValue);  // workspace too small
  EXPECT_EQ(squared_norm(out, false, p, 100, reinterpret_cast<char*>(p) + 8, ws, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(squared_norm(nullptr, false, p, 100, p, ws, nullptr), cudaErrorInvalidValue);
}

TEST(OptimizerKernels, NormWorkspaceDependsOnTheSizeOnly) {
  EXPECT_EQ(squared_norm_workspace_size(0), 0u);
  EXPECT_EQ(squared_norm_workspace_size(1), sizeof(double));
  EXPECT_EQ(squared_norm_workspace_size(int64_t{1} << 40), squared_norm_workspace_size(int64_t{1} << 30));
  EXPECT_LE(squared_norm_workspace_size(int64_t{1} << 40), size_t{8} << 10);
}

}  // namespace
}  // namespace dtrain::kernels::testing
