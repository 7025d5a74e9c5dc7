// 2-D max pooling over channels-last activations, forward (values and a
// one-byte argmax) and a gather backward (max_pool.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "models/kernels/device_utils.cuh"
#include "models/kernels/max_pool.h"

namespace dtrain::kernels {
namespace detail {
namespace {

constexpr int kPoolThreads = 256;
constexpr int64_t kMaxGridY = 65535;
constexpr int64_t kMaxImageElements = INT32_MAX;

// The shape of one call. A block row (blockIdx.y) walks the images; the
// threads of a row cover one image's (position, channel vector) pairs.
struct PoolGeometry {
  int64_t batch;
  int in_h, in_w, out_h, out_w, channels, kernel, stride, padding;
};

// VEC argmax bytes as one integer (byte j = channel c + j): one access,
// kept in a register.
template <int VEC>
struct ByteWord;
template <>
struct ByteWord<1> {
  using type = uint8_t;
};
template <>
struct ByteWord<4> {
  using type = uint32_t;
};
template <>
struct ByteWord<8> {
  using type = uint64_t;
};

// Forward: one thread per output position and VEC channels. KS is the
// kernel size when known at compile time (loops unrolled), else 0.
template <typename T, int VEC, int KS>
__global__ void __launch_bounds__(kPoolThreads)
    max_pool_forward_kernel(const T* x, T* y, uint8_t* argmax, PoolGeometry g) {
  const int k = KS > 0 ? KS : g.kernel;
  const uint32_t cvecs = static_cast<uint32_t>(g.channels / VEC);
  const uint32_t i = blockIdx.x * kPoolThreads + threadIdx.x;
  if (i >= static_cast<uint32_t>(g.out_h * g.out_w) * cvecs) return;
  const int c = static_cast<int>(i % cvecs) * VEC;
  const uint32_t pos = i / cvecs;
  const int ow = static_cast<int>(pos % g.out_w), oh = static_cast<int>(pos / g.out_w);
  const int h0 = oh * g.stride - g.padding, w0 = ow * g.stride - g.padding;
  // The window's first in-bounds element: the index while nothing beats -inf.
  const uint8_t first = static_cast<uint8_t>(max(0, -h0) * k + max(0, -w0));
  const int64_t in_image = static_cast<int64_t>(g.in_h) * g.in_w * g.channels;
  const int64_t out_image = static_cast<int64_t>(g.out_h) * g.out_w * g.channels;
  const int64_t out_off = static_cast<int64_t>(pos) * g.channels + c;
  for (int64_t n = blockIdx.y; n < g.batch; n += gridDim.y) {
    const T* xn = x + n * in_image;
    Pack<T, VEC> best;
    float best_f[VEC];
    uint32_t arg[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      best_f[j] = -INFINITY;
      best.v[j] = from_float<T>(-INFINITY);
      arg[j] = first;
    }
#pragma unroll
    for (int kh = 0; kh < (KS > 0 ? KS : kMaxPoolMaxKernel); ++kh) {
      const int ih = h0 + kh;
      if (kh >= k) break;
      if (ih < 0 || ih >= g.in_h) continue;
#pragma unroll
      for (int kw = 0; kw < (KS > 0 ? KS : kMaxPoolMaxKernel); ++kw) {
        const int iw = w0 + kw;
        if (kw >= k) break;
        if (iw < 0 || iw >= g.in_w) continue;
        Raw<T, VEC> v;
        load_raw<T, VEC>(xn + (static_cast<int64_t>(ih) * g.in_w + iw) * g.channels + c, v);
        const uint32_t idx = static_cast<uint32_t>(kh * k + kw);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float f = to_float(v.v[j]);
          if (f > best_f[j] || isnan(f)) {  // torch's test: ties keep the first, NaN wins
            best_f[j] = f;
            best.v[j] = v.v[j];
            arg[j] = idx;
          }
        }
      }
    }
    using Word = typename ByteWord<VEC>::type;
    Word word = 0;
#pragma unroll
    for (int j = 0; j < VEC; ++j) word |= static_cast<Word>(static_cast<Word>(arg[j]) << (8 * j));
    store_pack<T, VEC>(y + n * out_image + out_off, best);
    *reinterpret_cast<Word*>(argmax + n * out_image + out_off) = word;
  }
}

// Backward: one thread per input position and VEC channels; it gathers the
// windows that contain the position, (oh, ow) ascending, adding dy where the
// window's argmax is this position.
template <typename T, int VEC>
__global__ void __launch_bounds__(kPoolThreads)
    max_pool_backward_kernel(const T* dy, const uint8_t* argmax, T* dx, PoolGeometry g) {
  using Word = typename ByteWord<VEC>::type;
  const uint32_t cvecs = static_cast<uint32_t>(g.channels / VEC);
  const uint32_t i = blockIdx.x * kPoolThreads + threadIdx.x;
  if (i >= static_cast<uint32_t>(g.in_h * g.in_w) * cvecs) return;
  const int c = static_cast<int>(i % cvecs) * VEC;
  const uint32_t pos = i / cvecs;
  const int iw = static_cast<int>(pos % g.in_w), ih = static_cast<int>(pos / g.in_w);
  // Windows oh with 0 <= ih + padding - oh * stride < kernel.
  const int hs = ih + g.padding, ws = iw + g.padding;
  const int oh0 = hs < g.kernel ? 0 : (hs - g.kernel) / g.stride + 1;
  const int ow0 = ws < g.kernel ? 0 : (ws - g.kernel) / g.stride + 1;
  const int oh1 = min(g.out_h - 1, hs / g.stride), ow1 = min(g.out_w - 1, ws / g.stride);
  const int64_t in_image = static_cast<int64_t>(g.in_h) * g.in_w * g.channels;
  const int64_t out_image = static_cast<int64_t>(g.out_h) * g.out_w * g.channels;
  for (int64_t n = blockIdx.y; n < g.batch; n += gridDim.y) {
    const T* dyn = dy + n * out_image;
    const uint8_t* an = argmax + n * out_image;
    float acc[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[j] = 0.f;
    for (int oh = oh0; oh <= oh1; ++oh) {
      const int kh = hs - oh * g.stride;
      for (int ow = ow0; ow <= ow1; ++ow) {
        const uint32_t idx = static_cast<uint32_t>(kh * g.kernel + ws - ow * g.stride);
        const int64_t off = (static_cast<int64_t>(oh) * g.out_w + ow) * g.channels + c;
        const Word word = *reinterpret_cast<const Word*>(an + off);
        bool hit[VEC];
        bool any = false;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          hit[j] = static_cast<uint32_t>((word >> (8 * j)) & 0xffu) == idx;
          any |= hit[j];
        }
        if (!any) continue;  // dy is read only where some channel needs it
        float d[VEC];
        load_floats<T, VEC>(dyn + off, d);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          if (hit[j]) acc[j] += d[j];
        }
      }
    }
    store_floats<T, VEC>(dx + n * in_image + static_cast<int64_t>(pos) * g.channels + c, acc);
  }
}

// 16-byte accesses of T when channels and every pointer allow (argmax
// aligned to its VEC bytes).
template <typename T>
bool pool_vector_path(int channels, const void* argmax, std::initializer_list<const void*> ptrs) {
  return reinterpret_cast<uintptr_t>(argmax) % kVec16<T> == 0 && vector_path<T>(channels, ptrs);
}

// The geometry of a call, or false when the arguments are outside the limits.
bool make_geometry(int64_t batch, int height, int width, int channels, int kernel, int stride, int padding,
                   PoolGeometry& g) {
  g = PoolGeometry{batch, height, width, 0, 0, channels, kernel, stride, padding};
  g.out_h = max_pool2d_output_size(height, kernel, stride, padding);
  g.out_w = max_pool2d_output_size(width, kernel, stride, padding);
  if (batch < 0 || channels < 1 || g.out_h < 1 || g.out_w < 1) return false;
  return static_cast<int64_t>(height) * width * channels <= kMaxImageElements &&
         static_cast<int64_t>(g.out_h) * g.out_w * channels <= kMaxImageElements;
}

dim3 pool_grid(int64_t positions, int channels, int vec, int64_t batch) {
  const int64_t items = positions * (channels / vec);
  return dim3(static_cast<unsigned>(ceil_div(items, kPoolThreads)), static_cast<unsigned>(std::min(batch, kMaxGridY)));
}

template <typename T, int VEC>
cudaError_t launch_forward(const MaxPool2dForwardArgs& a, const PoolGeometry& g, cudaStream_t stream) {
  const dim3 grid = pool_grid(static_cast<int64_t>(g.out_h) * g.out_w, g.channels, VEC, g.batch);
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  if (g.kernel == 3) {
    max_pool_forward_kernel<T, VEC, 3><<<grid, kPoolThreads, 0, stream>>>(x, y, a.argmax, g);
  } else if (g.kernel == 2) {
    max_pool_forward_kernel<T, VEC, 2><<<grid, kPoolThreads, 0, stream>>>(x, y, a.argmax, g);
  } else {
    max_pool_forward_kernel<T, VEC, 0><<<grid, kPoolThreads, 0, stream>>>(x, y, a.argmax, g);
  }
  return launch_status();
}

cudaError_t forward(const MaxPool2dForwardArgs& a, cudaStream_t stream) {
  PoolGeometry g;
  if (!a.x || !a.y || !a.argmax || a.x == a.y ||
      !make_geometry(a.batch, a.height, a.width, a.channels, a.kernel, a.stride, a.padding, g)) {
    return cudaErrorInvalidValue;
  }
  return dispatch_act(a.act_dtype, [&](auto act) -> cudaError_t {
    using T = typename decltype(act)::type;
    if (g.batch == 0) return cudaSuccess;
    return with_vec<T>(pool_vector_path<T>(g.channels, a.argmax, {a.x, a.y}), [&](auto vec_tag) -> cudaError_t {
      return launch_forward<T, decltype(vec_tag)::value>(a, g, stream);
    });
  });
}

cudaError_t backward(const MaxPool2dBackwardArgs& a, cudaStream_t stream) {
  PoolGeometry g;
  if (!a.dy || !a.argmax || !a.dx || a.dx == a.dy || a.dx == static_cast<const void*>(a.argmax) ||
      !make_geometry(a.batch, a.height, a.width, a.channels, a.kernel, a.stride, a.padding, g)) {
    return cudaErrorInvalidValue;
  }
  return dispatch_act(a.act_dtype, [&](auto act) -> cudaError_t {
    using T = typename decltype(act)::type;
    if (g.batch == 0) return cudaSuccess;
    return with_vec<T>(pool_vector_path<T>(g.channels, a.argmax, {a.dy, a.dx}), [&](auto vec_tag) -> cudaError_t {
      constexpr int kV = decltype(vec_tag)::value;
      const dim3 grid = pool_grid(static_cast<int64_t>(g.in_h) * g.in_w, g.channels, kV, g.batch);
      max_pool_backward_kernel<T, kV><<<grid, kPoolThreads, 0, stream>>>(
          static_cast<const T*>(a.dy), a.argmax, static_cast<T*>(a.dx), g);
      return launch_status();
    });
  });
}

}  // namespace
}  // namespace detail

cudaError_t max_pool2d_forward(const MaxPool2dForwardArgs& args, cudaStream_t stream) {
  return detail::forward(args, stream);
}

cudaError_t max_pool2d_backward(const MaxPool2dBackwardArgs& args, cudaStream_t stream) {
  return detail::backward(args, stream);
}

}  // namespace dtrain::kernels
