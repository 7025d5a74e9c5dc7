// Max pooling over channels-last activations against a CPU reference with
// torch's semantics: values and argmax exact (ties, NaN, infinities),
// backward exact in fp32 and within one bf16 step of the fp32 sum in bf16,
// the same bits on a second run and from a CUDA graph, and the argument
// checks.
#include "models/kernels/max_pool.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"

namespace dtrain::kernels::testing {
namespace {

struct PoolShape {
  int64_t batch;
  int height, width, channels, kernel, stride, padding;
  int out_h() const { return max_pool2d_output_size(height, kernel, stride, padding); }
  int out_w() const { return max_pool2d_output_size(width, kernel, stride, padding); }
  size_t in_count() const { return static_cast<size_t>(batch) * height * width * channels; }
  size_t out_count() const { return static_cast<size_t>(batch) * out_h() * out_w() * channels; }
};

// kTies: few distinct values (-0 and +0 among them), so most windows tie;
// kSpecials: NaN, +-inf scattered, and the first rows of image 0 all -inf.
enum class Values { kRandom, kTies, kSpecials };

struct PoolCase {
  DType act;
  PoolShape shape;
  Values values = Values::kRandom;
  bool misalign = false;  // every tensor one element (argmax one byte) past its allocation: the scalar path
};

std::string poolCaseName(const ::testing::TestParamInfo<PoolCase>& info) {
  const PoolCase& c = info.param;
  const PoolShape& s = c.shape;
  const char* values[] = {"", "_ties", "_specials"};
  return std::string(dtype_name(c.act)) + "_n" + std::to_string(s.batch) + "_" + std::to_string(s.height) + "x" +
         std::to_string(s.width) + "_c" + std::to_string(s.channels) + "_k" + std::to_string(s.kernel) + "s" +
         std::to_string(s.stride) + "p" + std::to_string(s.padding) + values[static_cast<int>(c.values)] +
         (c.misalign ? "_misaligned" : "");
}

std::vector<float> make_input(const PoolCase& c, uint32_t seed) {
  const PoolShape& s = c.shape;
  std::vector<float> x = random_values(s.in_count(), seed, c.act);
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> pick(0, 99);
  const float inf = std::numeric_limits<float>::infinity();
  if (c.values == Values::kTies) {
    const float few[] = {-1.f, -0.f, 0.f, 1.f};
    for (float& v : x) v = few[pick(gen) % 4];
  } else if (c.values == Values::kSpecials) {
    for (float& v : x) {
      const int r = pick(gen);
      if (r < 4) v = std::numeric_limits<float>::quiet_NaN();
      if (r >= 4 && r < 9) v = -inf;
      if (r >= 9 && r < 11) v = inf;
    }
    const size_t row = static_cast<size_t>(s.width) * s.channels;
    for (size_t i = 0; i < std::min<size_t>(3, s.height) * row; ++i) x[i] = -inf;
  }
  return x;
}

// torch's scan: kh-major, `v > max || isnan(v)`, the maximum starting at
// -inf with the first in-bounds element as its index.
void reference_forward(const std::vector<float>& x, const PoolShape& s, std::vector<float>& y,
                       std::vector<uint8_t>& argmax) {
  const int oh_n = s.out_h(), ow_n = s.out_w(), k = s.kernel, ch = s.channels;
  y.assign(s.out_count(), 0.f);
  argmax.assign(s.out_count(), 0);
  for (int64_t n = 0; n < s.batch; ++n) {
    for (int oh = 0; oh < oh_n; ++oh) {
      for (int ow = 0; ow < ow_n; ++ow) {
        for (int c = 0; c < ch; ++c) {
          float best = -std::numeric_limits<float>::infinity();
          int arg = -1;
          for (int kh = 0; kh < k; ++kh) {
            for (int kw = 0; kw < k; ++kw) {
              const int ih = oh * s.stride - s.padding + kh, iw = ow * s.stride - s.padding + kw;
              if (ih < 0 || ih >= s.height || iw < 0 || iw >= s.width) continue;
              const float v = x[((n * s.height + ih) * s.width + iw) * ch + c];
              if (arg < 0) arg = kh * k + kw;
              if (v > best || std::isnan(v)) {
                best = v;
                arg = kh * k + kw;
              }
            }
          }
          const size_t o = ((n * oh_n + oh) * ow_n + ow) * ch + c;
          y[o] = best;
          argmax[o] = static_cast<uint8_t>(arg);
        }
      }
    }
  }
}

// fp32 sums, each dx element's terms in (oh, ow) ascending order.
std::vector<float> reference_backward(const std::vector<float>& dy, const std::vector<uint8_t>& argmax,
                                      const PoolShape& s) {
  const int oh_n = s.out_h(), ow_n = s.out_w(), k = s.kernel, ch = s.channels;
  std::vector<float> dx(s.in_count(), 0.f);
  for (int64_t n = 0; n < s.batch; ++n) {
    for (int oh = 0; oh < oh_n; ++oh) {
      for (int ow = 0; ow < ow_n; ++ow) {
        for (int c = 0; c < ch; ++c) {
          const size_t o = ((n * oh_n + oh) * ow_n + ow) * ch + c;
          const int ih = oh * s.stride - s.padding + argmax[o] / k, iw = ow * s.stride - s.padding + argmax[o] % k;
          dx[((n * s.height + ih) * s.width + iw) * ch + c] += dy[o];
        }
      }
    }
  }
  return dx;
}

bool same_value(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof(float)) == 0;  // -0 and +0 differ
}

// One step of bf16 at |ref| (2^-7 relative to the leading power of two).
double bf16_step(float ref) {
  int e = 0;
  std::frexp(ref, &e);
  return ref == 0.f ? 0.0 : std::ldexp(1.0, e - 8);
}

::testing::AssertionResult matches(const std::vector<float>& got, const std::vector<float>& ref, DType t) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const bool ok = t == DType::kFloat32 ? same_value(got[i], ref[i])
                                         : std::fabs(static_cast<double>(got[i]) - ref[i]) <= bf16_step(ref[i]);
    if (!ok) return ::testing::AssertionFailure() << "[" << i << "] got " << got[i] << ", reference " << ref[i];
  }
  return ::testing::AssertionSuccess();
}

// The tensors of one case on the device; misaligned cases start one
// element (argmax: one byte) into their allocations.
struct PoolBuffers {
  DeviceTensor x, y, dy, dx;
  DeviceBytes argmax;
  size_t shift;
  PoolBuffers(const PoolCase& c)
      : x(c.shape.in_count() + 1, c.act),
        y(c.shape.out_count() + 1, c.act),
        dy(c.shape.out_count() + 1, c.act),
        dx(c.shape.in_count() + 1, c.act),
        argmax(c.shape.out_count() + 16),
        shift(c.misalign ? 1 : 0) {}
  void* at(const DeviceTensor& t) const { return static_cast<char*>(t.data()) + shift * dtype_size(t.dtype()); }
  uint8_t* argmax_ptr() const { return static_cast<uint8_t*>(argmax.data()) + shift; }
};

MaxPool2dForwardArgs forward_args(const PoolCase& c, const PoolBuffers& b) {
  MaxPool2dForwardArgs a;
  a.x = b.at(b.x);
  a.y = b.at(b.y);
  a.argmax = b.argmax_ptr();
  a.batch = c.shape.batch;
  a.height = c.shape.height;
  a.width = c.shape.width;
  a.channels = c.shape.channels;
  a.kernel = c.shape.kernel;
  a.stride = c.shape.stride;
  a.padding = c.shape.padding;
  a.act_dtype = c.act;
  return a;
}

MaxPool2dBackwardArgs backward_args(const PoolCase& c, const PoolBuffers& b) {
  MaxPool2dBackwardArgs a;
  a.dy = b.at(b.dy);
  a.argmax = b.argmax_ptr();
  a.dx = b.at(b.dx);
  a.batch = c.shape.batch;
  a.height = c.shape.height;
  a.width = c.shape.width;
  a.channels = c.shape.channels;
  a.kernel = c.shape.kernel;
  a.stride = c.shape.stride;
  a.padding = c.shape.padding;
  a.act_dtype = c.act;
  return a;
}

std::vector<uint8_t> download_bytes(const void* p, size_t n) {
  std::vector<uint8_t> out(n);
  EXPECT_EQ(cudaMemcpy(out.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

class MaxPoolTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(MaxPoolTest, ForwardAndBackwardMatchTorchsSemanticsAndAreDeterministic) {
  DTRAIN_SKIP_WITHOUT_GPU();
  const PoolCase c = GetParam();
  const PoolShape& s = c.shape;
  ASSERT_GT(s.out_h(), 0);
  ASSERT_GT(s.out_w(), 0);
  const auto x = make_input(c, 1);
  const auto dy = random_values(s.out_count(), 2, c.act);
  PoolBuffers b(c);
  b.x.upload(x, b.shift);
  b.dy.upload(dy, b.shift);
  DTRAIN_CUDA_OK(cudaMemset(b.argmax.data(), 0xff, s.out_count() + 16));
  const MaxPool2dForwardArgs f = forward_args(c, b);
  const MaxPool2dBackwardArgs g = backward_args(c, b);
  DTRAIN_CUDA_OK(max_pool2d_forward(f, nullptr));
  DTRAIN_CUDA_OK(max_pool2d_backward(g, nullptr));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());

  std::vector<float> y_ref;
  std::vector<uint8_t> arg_ref;
  reference_forward(x, s, y_ref, arg_ref);
  const auto y_got = b.y.download(b.shift, s.out_count());
  for (size_t i = 0; i < y_ref.size(); ++i) {
    ASSERT_TRUE(same_value(y_got[i], y_ref[i])) << "y[" << i << "] got " << y_got[i] << ", reference " << y_ref[i];
  }
  EXPECT_EQ(download_bytes(b.argmax_ptr(), s.out_count()), arg_ref) << "argmax";
  EXPECT_TRUE(matches(b.dx.download(b.shift, s.in_count()), reference_backward(dy, arg_ref, s), c.act)) << "dx";

  // Again into poisoned buffers: the same bits.
  const auto y1 = b.y.bytes(), dx1 = b.dx.bytes();
  const auto arg1 = download_bytes(b.argmax.data(), s.out_count() + 16);
  b.y.fill_nan();
  b.dx.fill_nan();
  DTRAIN_CUDA_OK(cudaMemset(b.argmax_ptr(), 0xff, s.out_count()));
  DTRAIN_CUDA_OK(max_pool2d_forward(f, nullptr));
  DTRAIN_CUDA_OK(max_pool2d_backward(g, nullptr));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(b.y.bytes(), y1);
  EXPECT_EQ(download_bytes(b.argmax.data(), s.out_count() + 16), arg1);
  EXPECT_EQ(b.dx.bytes(), dx1);
}

std::vector<PoolCase> pool_cases() {
  // {batch, height, width, channels, kernel, stride, padding}
  const PoolShape stem{2, 32, 30, 64, 3, 2, 1};  // ResNet's stem, smaller
  const PoolShape rgb{2, 15, 17, 3, 3, 2, 1};    // 3 channels: the scalar path
  const PoolShape odd{3, 7, 9, 72, 3, 2, 1};
  const PoolShape pairs{2, 7, 9, 64, 2, 2, 0};
  const PoolShape pairs72{1, 8, 8, 72, 2, 2, 0};
  const PoolShape same{2, 7, 9, 72, 3, 1, 1};
  const PoolShape same_rgb{1, 9, 7, 3, 3, 1, 1};
  const PoolShape wide{2, 11, 13, 16, 5, 3, 2};  // a kernel size without its own instantiation
  const PoolShape k8{1, 20, 19, 8, 8, 4, 4};     // argmax up to 63
  const PoolShape k1{2, 5, 6, 24, 1, 1, 0};
  const PoolShape gaps{1, 13, 12, 40, 4, 3, 0};  // the last input row is in no window: dx 0
  std::vector<PoolCase> out;
  for (DType act : {DType::kFloat32, DType::kBFloat16}) {
    for (const PoolShape& s : {stem, rgb, odd, pairs, pairs72, same, same_rgb, wide, k8, k1, gaps}) {
      out.push_back({act, s});
    }
    for (const PoolShape& s : {stem, odd, pairs, same_rgb, k8}) out.push_back({act, s, Values::kTies});
    for (const PoolShape& s : {stem, rgb, same, wide}) out.push_back({act, s, Values::kSpecials});
    out.push_back({act, stem, Values::kRandom, true});
    out.push_back({act, odd, Values::kSpecials, true});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, MaxPoolTest, ::testing::ValuesIn(pool_cases()), poolCaseName);

// Forward + backward captured into a graph and replayed twice: the eager bits.
TEST(MaxPoolKernels, CapturesIntoAGraph) {
  DTRAIN_SKIP_WITHOUT_GPU();
  const PoolCase c{DType::kBFloat16, {4, 56, 56, 64, 3, 2, 1}};
  PoolBuffers b(c);
  b.x.upload(make_input(c, 11));
  b.dy.upload(random_values(c.shape.out_count(), 12, c.act));
  const MaxPool2dForwardArgs f = forward_args(c, b);
  const MaxPool2dBackwardArgs g = backward_args(c, b);
  DTRAIN_CUDA_OK(max_pool2d_forward(f, nullptr));
  DTRAIN_CUDA_OK(max_pool2d_backward(g, nullptr));
  DTRAIN_CUDA_OK(cudaDeviceSynchronize());
  const auto y1 = b.y.bytes(), dx1 = b.dx.bytes();
  const auto arg1 = download_bytes(b.argmax.data(), c.shape.out_count());

  cudaStream_t stream;
  DTRAIN_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  DTRAIN_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  ASSERT_EQ(max_pool2d_forward(f, stream), cudaSuccess);
  ASSERT_EQ(max_pool2d_backward(g, stream), cudaSuccess);
  DTRAIN_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  DTRAIN_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    b.y.fill_nan();
    b.dx.fill_nan();
    DTRAIN_CUDA_OK(cudaMemset(b.argmax.data(), 0xff, c.shape.out_count()));
    DTRAIN_CUDA_OK(cudaGraphLaunch(exec, stream));
    DTRAIN_CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_EQ(b.y.bytes(), y1) << "replay " << replay;
    EXPECT_EQ(download_bytes(b.argmax.data(), c.shape.out_count()), arg1) << "replay " << replay;
    EXPECT_EQ(b.dx.bytes(), dx1) << "replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

static_assert(max_pool2d_output_size(112, 3, 2, 1) == 56);
static_assert(max_pool2d_output_size(7, 2, 2, 0) == 3);
static_assert(max_pool2d_output_size(9, 3, 1, 1) == 9);
static_assert(max_pool2d_output_size(13, 4, 3, 0) == 4);
static_assert(max_pool2d_output_size(1, 3, 1, 0) == 0);   // the window is larger than the input
static_assert(max_pool2d_output_size(5, 3, 2, 2) == 0);   // padding above kernel / 2
static_assert(max_pool2d_output_size(64, 9, 1, 0) == 0);  // kernel above 8

void smallShape(MaxPool2dShape& a) {
  a.batch = 2;
  a.height = a.width = 16;
  a.channels = 64;
}

// Argument checks return before anything is enqueued: these run without a GPU.
TEST(MaxPoolKernels, RejectsBadArgumentsWithoutTouchingTheDevice) {
  void* p = reinterpret_cast<void*>(0x10000);
  void* q = reinterpret_cast<void*>(0x20000);
  uint8_t* arg = reinterpret_cast<uint8_t*>(0x30000);
  const auto forward = [&](auto change) {
    MaxPool2dForwardArgs a;
    a.x = p;
    a.y = q;
    a.argmax = arg;
    smallShape(a);
    change(a);
    return max_pool2d_forward(a, nullptr);
  };
  EXPECT_EQ(forward([](auto& a) { a.x = nullptr; }), cudaErrorInvalidValue);
  EXPECT_EQ(forward([](auto& a) { a.argmax = nullptr; }), cudaErrorInvalidValue);
  EXPECT_EQ(forward([&](auto& a) { a.y = p; }), cudaErrorInvalidValue);  // in place
  EXPECT_EQ(forward([](auto& a) { a.kernel = 0; }), cudaErrorInvalidValue);
  EXPECT_EQ(forward([](auto& a) { a.kernel = 9; }), cudaErrorInvalidValue);
  EXPECT_EQ(forward([](auto& a) { a.stride = 0; }), cudaErrorInvalidValue);
  EXPECT_EQ(forward([](auto& a) { a.padding = -1; }), cudaErrorInvalidValue);
  EXPECT_EQ(forward([](auto& a) { a.padding = 2; }), cudaErrorInvalidValue);  // above kernel / 2
  EXPECT_EQ(forward([](auto& a) { a.height = 1; a.padding = 0; }), cudaErrorInvalidValue);  // no output row
  EXPECT_EQ(forward([](auto& a) { a.channels = 0; }), cudaErrorInvalidValue);
  EXPECT_EQ(forward([](auto& a) { a.batch = -1; }), cudaErrorInvalidValue);
  EXPECT_EQ(forward([](auto& a) { a.height = a.width = 65536; a.channels = 1; }), cudaErrorInvalidValue);
  EXPECT_EQ(forward([](auto& a) { a.act_dtype = static_cast<DType>(7); }), cudaErrorInvalidValue);
  EXPECT_EQ(forward([](auto& a) { a.batch = 0; }), cudaSuccess);  // nothing to do

  const auto backward = [&](auto change) {
    MaxPool2dBackwardArgs a;
    a.dy = p;
    a.argmax = arg;
    a.dx = q;
    smallShape(a);
    change(a);
    return max_pool2d_backward(a, nullptr);
  };
  EXPECT_EQ(backward([](auto& a) { a.dy = nullptr; }), cudaErrorInvalidValue);
  EXPECT_EQ(backward([](auto& a) { a.dx = nullptr; }), cudaErrorInvalidValue);
  EXPECT_EQ(backward([&](auto& a) { a.dx = p; }), cudaErrorInvalidValue);    // dx over dy
  EXPECT_EQ(backward([&](auto& a) { a.dx = arg; }), cudaErrorInvalidValue);  // dx over argmax
  EXPECT_EQ(backward([](auto& a) { a.kernel = 9; }), cudaErrorInvalidValue);
  EXPECT_EQ(backward([](auto& a) { a.width = 2; a.padding = 0; }), cudaErrorInvalidValue);  // no output column
  EXPECT_EQ(backward([](auto& a) { a.act_dtype = static_cast<DType>(7); }), cudaErrorInvalidValue);
  EXPECT_EQ(backward([](auto& a) { a.batch = 0; }), cudaSuccess);
}

}  // namespace
}  // namespace dtrain::kernels::testing
