// Fused batch norm (+ residual add) (+ ReLU) over channels-last rows,
// forward and backward (batch_norm.h).
#include <algorithm>
#include <initializer_list>
#include <type_traits>

#include "models/kernels/batch_norm.h"
#include "models/kernels/column_partials.cuh"

namespace dtrain::kernels {
namespace detail {
namespace {

constexpr int kBnThreads = 256;
// Blocks of the reductions over rows (statistics, backward sums): a bound
// that is not read off the device, so the number of partials, hence the
// summation order and the bits, depend on the shape alone. 1056 = 8 blocks
// of 256 threads on each of the 132 multiprocessors of an H100/H200.
constexpr int kBnReduceBlocks = 1056;
// Blocks of the elementwise passes (apply, dx): each thread walks a few rows
// with its channels' coefficients in registers.
constexpr int kBnApplyBlocks = 2112;
// The backward passes hold five or six coefficients per channel in
// registers: at least three blocks of them per multiprocessor (<= 85
// registers a thread) keep enough loads in flight.
constexpr int kBnMinBlocks = 3;

// A block is `tcols` threads across the channels (VEC channels each) times
// `brows` rows; gx blocks cover the channels, and a block row y (of gy)
// walks rows y * brows + ty, stepping gy * brows. Small channel counts (64
// bf16 channels: 8 vectors) put several rows in one warp, so a warp still
// reads contiguous 16-byte vectors.
struct ChannelTiles {
  int vec = 1;
  int tcols = 32;
  int brows = 8;
  int gx = 1;
};

ChannelTiles channel_tiles(int channels, int vec) {
  ChannelTiles t;
  t.vec = vec;
  const int cvecs = ceil_div(channels, vec);
  t.tcols = 1;
  while (t.tcols < cvecs && t.tcols < 32) t.tcols *= 2;
  t.brows = kBnThreads / t.tcols;
  t.gx = ceil_div(cvecs, t.tcols);
  return t;
}

// A pure function of the shape (and the vector width).
int row_groups(int64_t rows, const ChannelTiles& t, int max_blocks) {
  const int64_t g = std::min<int64_t>(ceil_div(rows, t.brows), 65535);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(g, std::max(1, max_blocks / t.gx))));
}

// Merges the (count, mean, M2) of a set b into a (Chan et al.): no
// difference of large sums, so no cancellation when |mean| >> std.
__device__ __forceinline__ void chan_merge(float& n, float& mean, float& m2, float nb, float mean_b, float m2_b) {
  if (nb == 0.f) return;
  const float total = n + nb;
  const float delta = mean_b - mean;
  const float fb = nb / total;
  mean += delta * fb;
  m2 += m2_b + delta * delta * n * fb;
  n = total;
}

// Merges the statistics of thread b (count sh_n[b], VEC means and M2s) into
// those of thread a, in shared memory.
template <int VEC>
__device__ __forceinline__ void merge_shared(float* sh_n, float* sh_mean, float* sh_m2, int a, int b) {
  const float na = sh_n[a], nb = sh_n[b];
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    float n = na, mean = sh_mean[a * VEC + j], m2 = sh_m2[a * VEC + j];
    chan_merge(n, mean, m2, nb, sh_mean[b * VEC + j], sh_m2[b * VEC + j]);
    sh_mean[a * VEC + j] = mean;
    sh_m2[a * VEC + j] = m2;
  }
  sh_n[a] = na + nb;
}

constexpr int kBnLoadsAhead = 4;

template <int VEC>
__device__ __forceinline__ void shifted_sums(const float (&v)[VEC], const float (&shift)[VEC], float (&s1)[VEC],
                                             float (&s2)[VEC]) {
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const float d = v[j] - shift[j];
    s1[j] += d;
    s2[j] += d * d;
  }
}

// Statistics, first level: each thread sums its rows shifted by its first
// value (so the squares stay small next to the variance), turns that into
// (n, mean, M2), and the block merges its threads in a fixed tree; one (mean,
// M2) partial per channel goes to partials[blockIdx.y][2 * channels] (means
// first). The partial's count follows from the shape (bn_partial_count).
template <typename T, int VEC>
__global__ void __launch_bounds__(kBnThreads)
    bn_stats_kernel(const T* x, int64_t rows, int channels, int tcols, float* partials) {
  __shared__ float sh_mean[kBnThreads * VEC], sh_m2[kBnThreads * VEC], sh_n[kBnThreads];
  const int tx = threadIdx.x % tcols, ty = threadIdx.x / tcols;
  const int brows = kBnThreads / tcols;
  const int c = (blockIdx.x * tcols + tx) * VEC;
  const bool in = c < channels;
  float shift[VEC], s1[VEC], s2[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) shift[j] = s1[j] = s2[j] = 0.f;
  int n = 0;
  const int64_t step = static_cast<int64_t>(gridDim.y) * brows;
  int64_t r = static_cast<int64_t>(blockIdx.y) * brows + ty;
  if (in && r < rows) {
    load_floats<T, VEC>(x + r * channels + c, shift);
    // kBnLoadsAhead rows' loads issued before their sums (the rows in the
    // same order as one at a time): a read-only pass needs them in flight.
    for (; r + (kBnLoadsAhead - 1) * step < rows; r += kBnLoadsAhead * step) {
      float v[kBnLoadsAhead][VEC];
#pragma unroll
      for (int u = 0; u < kBnLoadsAhead; ++u) load_floats<T, VEC>(x + (r + u * step) * channels + c, v[u]);
#pragma unroll
      for (int u = 0; u < kBnLoadsAhead; ++u) shifted_sums<VEC>(v[u], shift, s1, s2);
      n += kBnLoadsAhead;
    }
    for (; r < rows; r += step) {
      float v[VEC];
      load_floats<T, VEC>(x + r * channels + c, v);
      shifted_sums<VEC>(v, shift, s1, s2);
      ++n;
    }
  }
  const float nf = static_cast<float>(n);
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    sh_mean[threadIdx.x * VEC + j] = n ? shift[j] + s1[j] / nf : 0.f;
    sh_m2[threadIdx.x * VEC + j] = n ? fmaxf(s2[j] - s1[j] * s1[j] / nf, 0.f) : 0.f;
  }
  sh_n[threadIdx.x] = nf;
  // A fixed tree over the block's rows: row ty takes in row ty + half.
  for (int half = brows / 2; half > 0; half /= 2) {
    __syncthreads();
    if (ty < half) merge_shared<VEC>(sh_n, sh_mean, sh_m2, threadIdx.x, threadIdx.x + half * tcols);
  }
  if (ty != 0 || !in) return;
  float* out = partials + static_cast<int64_t>(blockIdx.y) * 2 * channels;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    if (c + j >= channels) break;
    out[c + j] = sh_mean[tx * VEC + j];
    out[channels + c + j] = sh_m2[tx * VEC + j];
  }
}

constexpr int kStatColumns = 32;  // channels per block of the final merge
constexpr int kStatLanes = 32;    // partials merged in parallel per channel

// Rows of block row p: those r with (r / brows) % num_partials == p, i.e.
// `full` whole cycles of brows rows each, plus what the last, partial cycle
// (`tail` rows) leaves it.
__device__ __forceinline__ float bn_partial_count(int p, int64_t full, int64_t tail, int brows) {
  int64_t rem = tail - static_cast<int64_t>(p) * brows;
  rem = rem < 0 ? 0 : (rem > brows ? brows : rem);
  return static_cast<float>(full * brows + rem);
}

// Statistics, second level: lane l of each channel sums partials l, l +
// 32, ... in order, then the lanes merge in a fixed tree; writes the saved
// statistics and updates the running ones as torch does.
__global__ void __launch_bounds__(kStatColumns* kStatLanes)
    bn_stats_finalize_kernel(const float* partials, int num_partials, int brows, int64_t rows, int channels,
                             float eps, float momentum, float* save_mean, float* save_invstd, float* running_mean,
                             float* running_var) {
  __shared__ float sh[3][kStatLanes][kStatColumns + 1];
  const int c = blockIdx.x * kStatColumns + threadIdx.x;
  float n = 0.f, mean = 0.f, m2 = 0.f;
  if (c < channels) {
    const int64_t cycle = static_cast<int64_t>(num_partials) * brows;
    const int64_t full = rows / cycle, tail = rows - full * cycle;
    // The lane's partials (p = l, l + 32, ..., eight loaded ahead) summed
    // as deviations from partial 0's mean, which is close to every
    // partial's: sums of squares without cancellation and without a
    // division per partial.
    const float shift = partials[c];
    float sd = 0.f, sq = 0.f;
    constexpr int kAhead = 8;
    for (int p0 = threadIdx.y; p0 < num_partials; p0 += kAhead * kStatLanes) {
      float pm[kAhead], pv[kAhead];
#pragma unroll
      for (int u = 0; u < kAhead; ++u) {
        const int p = p0 + u * kStatLanes;
        const float* part = partials + static_cast<int64_t>(p) * 2 * channels;
        pm[u] = p < num_partials ? part[c] : 0.f;
        pv[u] = p < num_partials ? part[channels + c] : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kAhead; ++u) {
        const int p = p0 + u * kStatLanes;
        if (p >= num_partials) continue;
        const float np = bn_partial_count(p, full, tail, brows), d = pm[u] - shift;
        n += np;
        sd += np * d;
        sq += pv[u] + np * d * d;
      }
    }
    if (n > 0.f) {
      mean = shift + sd / n;
      m2 = fmaxf(sq - sd * sd / n, 0.f);
    }
  }
  sh[0][threadIdx.y][threadIdx.x] = n;
  sh[1][threadIdx.y][threadIdx.x] = mean;
  sh[2][threadIdx.y][threadIdx.x] = m2;
  for (int half = kStatLanes / 2; half > 0; half /= 2) {
    __syncthreads();
    if (threadIdx.y < half) {
      const int l = threadIdx.y, o = threadIdx.y + half, x = threadIdx.x;
      chan_merge(n, mean, m2, sh[0][o][x], sh[1][o][x], sh[2][o][x]);
      sh[0][l][x] = n;
      sh[1][l][x] = mean;
      sh[2][l][x] = m2;
    }
  }
  if (threadIdx.y != 0 || c >= channels) return;
  const float m = static_cast<float>(rows);
  save_mean[c] = mean;
  save_invstd[c] = rsqrtf(m2 / m + eps);
  if (running_mean) running_mean[c] = (1.f - momentum) * running_mean[c] + momentum * mean;
  if (running_var) running_var[c] = (1.f - momentum) * running_var[c] + momentum * (m2 / (m - 1.f));
}

template <int VEC>
__device__ __forceinline__ void load_params(const float* p, int c, int channels, float (&out)[VEC]) {
  if (VEC == 1 || c + VEC <= channels) {
    load_floats<float, VEC>(p + c, out);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = c + j < channels ? p[c + j] : 0.f;
  }
}

// y = act(weight (x - mean) invstd + bias [+ residual]). stat is invstd, or
// the running variance when stat_is_var (eval: invstd = 1/sqrt(var + eps));
// with save_mean/save_invstd, the block row 0 writes the mean and invstd it used.
template <typename T, int VEC>
__global__ void __launch_bounds__(kBnThreads)
    bn_apply_kernel(const T* x, const T* residual, T* y, const float* weight, const float* bias, const float* mean,
                    const float* stat, bool stat_is_var, float eps, int64_t rows, int channels, int tcols, bool relu,
                    float* save_mean, float* save_invstd) {
  const int tx = threadIdx.x % tcols, ty = threadIdx.x / tcols;
  const int brows = kBnThreads / tcols;
  const int c = (blockIdx.x * tcols + tx) * VEC;
  if (c >= channels) return;
  float m[VEC], inv[VEC], s[VEC], b[VEC];
  load_params<VEC>(mean, c, channels, m);
  load_params<VEC>(stat, c, channels, inv);
  load_params<VEC>(weight, c, channels, s);
  load_params<VEC>(bias, c, channels, b);
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    if (stat_is_var) inv[j] = rsqrtf(inv[j] + eps);
    s[j] *= inv[j];
  }
  if (save_mean && blockIdx.y == 0 && ty == 0) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      if (c + j < channels) {
        save_mean[c + j] = m[j];
        save_invstd[c + j] = inv[j];
      }
    }
  }
  const int64_t step = static_cast<int64_t>(gridDim.y) * brows;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * brows + ty; r < rows; r += step) {
    const int64_t off = r * channels + c;
    float v[VEC], out[VEC];
    load_floats<T, VEC>(x + off, v);
    if (residual) {
      float res[VEC];
      load_floats<T, VEC>(residual + off, res);
#pragma unroll
      for (int j = 0; j < VEC; ++j) out[j] = (v[j] - m[j]) * s[j] + b[j] + res[j];
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) out[j] = (v[j] - m[j]) * s[j] + b[j];
    }
    if (relu) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) out[j] = out[j] < 0.f ? 0.f : out[j];  // NaN stays NaN, as torch's relu
    }
    store_floats<T, VEC>(y + off, out);
  }
}

// ReLU's mask: y > 0 when y is given, else recomputed from x as the
// forward computed y before its ReLU, (x - mean) (weight invstd) + bias > 0
// (no residual was added), with the apply kernel's arithmetic.
// The mask is a template argument (MASK): each kernel holds only the
// coefficients its mask needs in registers.
enum BnMaskFrom : int { kNoMask = 0, kMaskFromY = 1, kMaskFromX = 2 };
struct BnMask {
  const void* y;      // act dtype (kMaskFromY)
  const float* bias;  // kMaskFromX
};

template <typename T, int VEC, int MASK>
__device__ __forceinline__ void mask_grad(const BnMask& k, int64_t off, const float (&v)[VEC], const float (&m)[VEC],
                                          const float (&a)[VEC], const float (&b)[VEC], float (&g)[VEC]) {
  if constexpr (MASK == kMaskFromY) {
    float out[VEC];
    load_floats<T, VEC>(static_cast<const T*>(k.y) + off, out);
#pragma unroll
    for (int j = 0; j < VEC; ++j) g[j] = out[j] > 0.f ? g[j] : 0.f;
  } else if constexpr (MASK == kMaskFromX) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) g[j] = (v[j] - m[j]) * a[j] + b[j] > 0.f ? g[j] : 0.f;
  }
}

// a = weight invstd, and b = bias for a mask recomputed from x.
template <int VEC, int MASK>
__device__ __forceinline__ void mask_coefficients(const BnMask& k, const float* weight, int c, int channels,
                                                  const float (&inv)[VEC], float (&a)[VEC], float (&b)[VEC]) {
  load_params<VEC>(weight, c, channels, a);
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    a[j] *= inv[j];
    b[j] = 0.f;
  }
  if constexpr (MASK == kMaskFromX) load_params<VEC>(k.bias, c, channels, b);
}

// Backward, first pass: per channel sum(g xhat) and sum(g) over the block's
// rows (each thread in row order, then the block's threads in row order),
// to partials[blockIdx.y][2 * channels] (the dweight sums first, then dbias).
template <typename T, int VEC, int MASK>
__global__ void __launch_bounds__(kBnThreads, kBnMinBlocks)
    bn_backward_reduce_kernel(const T* dy, BnMask k, const T* x, const float* weight, const float* mean,
                              const float* invstd, int64_t rows, int channels, int tcols, float* partials) {
  __shared__ float sh_gx[kBnThreads * VEC], sh_g[kBnThreads * VEC];
  const int tx = threadIdx.x % tcols, ty = threadIdx.x / tcols;
  const int brows = kBnThreads / tcols;
  const int c = (blockIdx.x * tcols + tx) * VEC;
  const bool in = c < channels;
  float sg[VEC], sgx[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) sg[j] = sgx[j] = 0.f;
  if (in) {
    float m[VEC], inv[VEC], a[VEC], b[VEC];
    load_params<VEC>(mean, c, channels, m);
    load_params<VEC>(invstd, c, channels, inv);
    mask_coefficients<VEC, MASK>(k, weight, c, channels, inv, a, b);
    const int64_t step = static_cast<int64_t>(gridDim.y) * brows;
#pragma unroll 2
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * brows + ty; r < rows; r += step) {
      const int64_t off = r * channels + c;
      float g[VEC], v[VEC];
      load_floats<T, VEC>(dy + off, g);
      load_floats<T, VEC>(x + off, v);
      mask_grad<T, VEC, MASK>(k, off, v, m, a, b, g);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        sg[j] += g[j];
        sgx[j] += g[j] * ((v[j] - m[j]) * inv[j]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    sh_gx[threadIdx.x * VEC + j] = sgx[j];
    sh_g[threadIdx.x * VEC + j] = sg[j];
  }
  __syncthreads();
  if (ty != 0 || !in) return;
#pragma unroll
  for (int j = 0; j < VEC; ++j) sg[j] = sgx[j] = 0.f;
  for (int i = 0; i < brows; ++i) {
    const int t = i * tcols + tx;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      sgx[j] += sh_gx[t * VEC + j];
      sg[j] += sh_g[t * VEC + j];
    }
  }
  float* out = partials + static_cast<int64_t>(blockIdx.y) * 2 * channels;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    if (c + j >= channels) break;
    out[c + j] = sgx[j];
    out[channels + c + j] = sg[j];
  }
}

// Backward, second pass: dx = weight invstd (g - dbias/M - xhat dweight/M)
// (training; eval: weight invstd g), and dresidual = g.
template <typename T, int VEC, int MASK>
__global__ void __launch_bounds__(kBnThreads, kBnMinBlocks)
    bn_backward_dx_kernel(const T* dy, BnMask k, const T* x, const float* weight, const float* mean,
                          const float* invstd, const float* dweight, const float* dbias, bool training, int64_t rows,
                          int channels, int tcols, T* dx, T* dresidual) {
  const int tx = threadIdx.x % tcols, ty = threadIdx.x / tcols;
  const int brows = kBnThreads / tcols;
  const int c = (blockIdx.x * tcols + tx) * VEC;
  if (c >= channels) return;
  float m[VEC], inv[VEC], a[VEC], b[VEC], kb[VEC], kw[VEC];
  load_params<VEC>(mean, c, channels, m);
  load_params<VEC>(invstd, c, channels, inv);
  mask_coefficients<VEC, MASK>(k, weight, c, channels, inv, a, b);  // a = weight invstd
  load_params<VEC>(dbias, c, channels, kb);
  load_params<VEC>(dweight, c, channels, kw);
  const float inv_rows = 1.f / static_cast<float>(rows);
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    kb[j] = training ? kb[j] * inv_rows : 0.f;
    kw[j] = training ? kw[j] * inv_rows : 0.f;
  }
  const int64_t step = static_cast<int64_t>(gridDim.y) * brows;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * brows + ty; r < rows; r += step) {
    const int64_t off = r * channels + c;
    float g[VEC], v[VEC], out[VEC];
    load_floats<T, VEC>(dy + off, g);
    load_floats<T, VEC>(x + off, v);
    mask_grad<T, VEC, MASK>(k, off, v, m, a, b, g);
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = a[j] * (g[j] - kb[j] - (v[j] - m[j]) * inv[j] * kw[j]);
    store_floats<T, VEC>(dx + off, out);
    if (dresidual) store_floats<T, VEC>(dresidual + off, g);
  }
}

// Calls f(std::integral_constant<int, MASK>) with the mask's source.
template <typename F>
cudaError_t with_mask(int mask_from, F&& f) {
  if (mask_from == kMaskFromY) return f(std::integral_constant<int, kMaskFromY>{});
  if (mask_from == kMaskFromX) return f(std::integral_constant<int, kMaskFromX>{});
  return f(std::integral_constant<int, kNoMask>{});
}

size_t workspace_bytes_for(int64_t rows, int channels) {
  if (rows <= 0 || channels <= 0) return 0;
  int groups = 0;
  for (int vec : {1, 4, 8}) {
    if (channels % vec == 0) groups = std::max(groups, row_groups(rows, channel_tiles(channels, vec), kBnReduceBlocks));
  }
  return static_cast<size_t>(groups) * 2 * channels * sizeof(float);
}

cudaError_t forward(const BatchNormForwardArgs& a, cudaStream_t stream) {
  if (!a.x || !a.y || !a.weight || !a.bias || a.rows < 0 || a.channels <= 0) return cudaErrorInvalidValue;
  if (a.training) {
    if (a.rows < 2 || !a.save_mean || !a.save_invstd || !a.workspace || !aligned16(a.workspace) ||
        a.workspace_bytes < workspace_bytes_for(a.rows, a.channels)) {
      return cudaErrorInvalidValue;
    }
  } else {
    if (!a.running_mean || !a.running_var || (!a.save_mean != !a.save_invstd)) return cudaErrorInvalidValue;
    if (a.rows == 0) return cudaSuccess;
  }
  return dispatch_act(a.act_dtype, [&](auto act) -> cudaError_t {
    using T = typename decltype(act)::type;
    const T* x = static_cast<const T*>(a.x);
    if (a.training) {
      float* partials = static_cast<float*>(a.workspace);
      int groups = 0, brows = 0;
      cudaError_t rc = with_vec<T>(vector_path<T>(a.channels, {a.x}), [&](auto vec_tag) -> cudaError_t {
        constexpr int kV = decltype(vec_tag)::value;
        const ChannelTiles t = channel_tiles(a.channels, kV);
        groups = row_groups(a.rows, t, kBnReduceBlocks);
        brows = t.brows;
        bn_stats_kernel<T, kV><<<dim3(t.gx, groups), kBnThreads, 0, stream>>>(x, a.rows, a.channels, t.tcols, partials);
        return launch_status();
      });
      if (rc != cudaSuccess) return rc;
      bn_stats_finalize_kernel<<<ceil_div(a.channels, kStatColumns), dim3(kStatColumns, kStatLanes), 0, stream>>>(
          partials, groups, brows, a.rows, a.channels, a.eps, a.momentum, a.save_mean, a.save_invstd, a.running_mean,
          a.running_var);
      rc = launch_status();
      if (rc != cudaSuccess) return rc;
    }
    const float* mean = a.training ? a.save_mean : a.running_mean;
    const float* stat = a.training ? a.save_invstd : a.running_var;
    const bool vec = vector_path<T>(a.channels, {a.x, a.residual, a.y, a.weight, a.bias, mean, stat, a.save_mean,
                                                 a.save_invstd});
    return with_vec<T>(vec, [&](auto vec_tag) -> cudaError_t {
      constexpr int kV = decltype(vec_tag)::value;
      const ChannelTiles t = channel_tiles(a.channels, kV);
      bn_apply_kernel<T, kV><<<dim3(t.gx, row_groups(a.rows, t, kBnApplyBlocks)), kBnThreads, 0, stream>>>(
          x, static_cast<const T*>(a.residual), static_cast<T*>(a.y), a.weight, a.bias, mean, stat, !a.training,
          a.eps, a.rows, a.channels, t.tcols, a.relu, a.training ? nullptr : a.save_mean,
          a.training ? nullptr : a.save_invstd);
      return launch_status();
    });
  });
}

cudaError_t backward(const BatchNormBackwardArgs& a, cudaStream_t stream) {
  if (!a.dy || !a.x || !a.weight || !a.mean || !a.invstd || !a.dx || !a.dweight || !a.dbias ||
      (a.relu && !a.y && !a.bias) || a.rows < 0 || a.channels <= 0 || (a.training && a.rows < 2)) {
    return cudaErrorInvalidValue;
  }
  if (a.rows > 0 && (!a.workspace || !aligned16(a.workspace) ||
                     a.workspace_bytes < workspace_bytes_for(a.rows, a.channels))) {
    return cudaErrorInvalidValue;
  }
  if (a.rows == 0) {  // eval over no rows: zero parameter gradients
    cudaError_t rc = cudaMemsetAsync(a.dweight, 0, sizeof(float) * a.channels, stream);
    if (rc != cudaSuccess) return rc;
    return cudaMemsetAsync(a.dbias, 0, sizeof(float) * a.channels, stream);
  }
  return dispatch_act(a.act_dtype, [&](auto act) -> cudaError_t {
    using T = typename decltype(act)::type;
    const T* dy = static_cast<const T*>(a.dy);
    const T* y = a.relu ? static_cast<const T*>(a.y) : nullptr;
    const BnMask mask{y, y ? nullptr : a.bias};
    const int mask_from = !a.relu ? kNoMask : y ? kMaskFromY : kMaskFromX;
    const T* x = static_cast<const T*>(a.x);
    float* partials = static_cast<float*>(a.workspace);
    int groups = 0;
    const bool reduce_vec = vector_path<T>(a.channels, {a.dy, y, a.x, a.weight, mask.bias, a.mean, a.invstd});
    cudaError_t rc = with_vec<T>(reduce_vec, [&](auto vec_tag) -> cudaError_t {
      constexpr int kV = decltype(vec_tag)::value;
      const ChannelTiles t = channel_tiles(a.channels, kV);
      groups = row_groups(a.rows, t, kBnReduceBlocks);
      return with_mask(mask_from, [&](auto mask_tag) -> cudaError_t {
        bn_backward_reduce_kernel<T, kV, decltype(mask_tag)::value><<<dim3(t.gx, groups), kBnThreads, 0, stream>>>(
            dy, mask, x, a.weight, a.mean, a.invstd, a.rows, a.channels, t.tcols, partials);
        return launch_status();
      });
    });
    if (rc != cudaSuccess) return rc;
    rc = launch_reduce_column_partials<float>(partials, groups, 2 * a.channels, a.channels, a.dweight, a.dbias, false,
                                              stream);
    if (rc != cudaSuccess) return rc;
    const bool vec = vector_path<T>(a.channels, {a.dy, y, a.x, a.weight, mask.bias, a.mean, a.invstd, a.dweight,
                                                 a.dbias, a.dx, a.dresidual});
    return with_vec<T>(vec, [&](auto vec_tag) -> cudaError_t {
      constexpr int kV = decltype(vec_tag)::value;
      const ChannelTiles t = channel_tiles(a.channels, kV);
      return with_mask(mask_from, [&](auto mask_tag) -> cudaError_t {
        bn_backward_dx_kernel<T, kV, decltype(mask_tag)::value>
            <<<dim3(t.gx, row_groups(a.rows, t, kBnApplyBlocks)), kBnThreads, 0, stream>>>(
                dy, mask, x, a.weight, a.mean, a.invstd, a.dweight, a.dbias, a.training, a.rows, a.channels, t.tcols,
                static_cast<T*>(a.dx), static_cast<T*>(a.dresidual));
        return launch_status();
      });
    });
  });
}

}  // namespace
}  // namespace detail

size_t batch_norm_workspace_size(int64_t rows, int channels) { return detail::workspace_bytes_for(rows, channels); }

cudaError_t batch_norm_forward(const BatchNormForwardArgs& args, cudaStream_t stream) {
  return detail::forward(args, stream);
}

cudaError_t batch_norm_backward(const BatchNormBackwardArgs& args, cudaStream_t stream) {
  return detail::backward(args, stream);
}

}  // namespace dtrain::kernels
