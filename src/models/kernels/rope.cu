// Rotary position embeddings, forward and backward (rope.h).
#include <algorithm>
#include <initializer_list>
#include <type_traits>

#include "models/kernels/device_utils.cuh"
#include "models/kernels/rope.h"

namespace dtrain::kernels {
namespace detail {
namespace {

constexpr int kRopeThreads = 256;
constexpr int kRopeHeadUnroll = 4;  // heads whose loads are in flight together

struct RopeView {
  const void* in;
  void* out;
  int heads;
  int64_t in_stride;
  int64_t out_stride;
};

template <typename T, int VEC>
__device__ __forceinline__ void rotate_heads(const RopeView& t, int64_t token, int col, int head_dim,
                                             const float (&cs)[VEC / 2], const float (&sn)[VEC / 2]) {
  if (!t.in) return;
  const T* in = static_cast<const T*>(t.in) + token * t.in_stride + col;
  T* out = static_cast<T*>(t.out) + token * t.out_stride + col;
  for (int h0 = 0; h0 < t.heads; h0 += kRopeHeadUnroll) {
    Pack<T, VEC> v[kRopeHeadUnroll];
#pragma unroll
    for (int u = 0; u < kRopeHeadUnroll; ++u) {
      if (h0 + u < t.heads) v[u] = load_pack<T, VEC>(in + static_cast<int64_t>(h0 + u) * head_dim);
    }
#pragma unroll
    for (int u = 0; u < kRopeHeadUnroll; ++u) {
      if (h0 + u >= t.heads) continue;
      Pack<T, VEC> o;
#pragma unroll
      for (int p = 0; p < VEC / 2; ++p) {
        const float x0 = to_float(v[u].v[2 * p]);
        const float x1 = to_float(v[u].v[2 * p + 1]);
        o.v[2 * p] = from_float<T>(x0 * cs[p] - x1 * sn[p]);
        o.v[2 * p + 1] = from_float<T>(x0 * sn[p] + x1 * cs[p]);
      }
      store_pack<T, VEC>(out + static_cast<int64_t>(h0 + u) * head_dim, o);
    }
  }
}

// One thread per (token, VEC consecutive elements of head_dim): the angles
// are computed once and applied to every head of q and k.
template <typename T, int VEC>
__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(RopeView q, RopeView k, const float* inv_freq, const int32_t* positions, int64_t tokens, int seq_len,
                int head_dim, float direction) {
  const int vectors = head_dim / VEC;
  const int64_t total = tokens * vectors;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t token = idx / vectors;
    const int col = static_cast<int>(idx - token * vectors) * VEC;
    const int pos = positions ? positions[token] : static_cast<int>(token % seq_len);
    float cs[VEC / 2], sn[VEC / 2];
#pragma unroll
    for (int p = 0; p < VEC / 2; ++p) {
      const float angle = static_cast<float>(pos) * inv_freq[col / 2 + p];
      sincosf(angle, &sn[p], &cs[p]);
      sn[p] *= direction;
    }
    rotate_heads<T, VEC>(q, token, col, head_dim, cs, sn);
    rotate_heads<T, VEC>(k, token, col, head_dim, cs, sn);
  }
}

bool valid_tensor(const RopeTensor& t) { return !t.in || (t.out && t.heads > 0); }

RopeView view(const RopeTensor& t, int head_dim) {
  const int64_t dense = static_cast<int64_t>(t.heads) * head_dim;
  return RopeView{t.in, t.out, t.heads, t.in_token_stride ? t.in_token_stride : dense,
                  t.out_token_stride ? t.out_token_stride : dense};
}

template <typename T>
bool rope_vectorised(int head_dim, const RopeView& q, const RopeView& k) {
  constexpr int kV = kVec16<T>;
  if (head_dim % kV != 0) return false;
  for (const RopeView* t : {&q, &k}) {
    if (t->in && (!aligned16(t->in) || !aligned16(t->out) || t->in_stride % kV || t->out_stride % kV)) return false;
  }
  return true;
}

cudaError_t rope(const RopeArgs& a, float direction, cudaStream_t stream) {
  if (a.head_dim <= 0 || a.head_dim % 2 != 0 || a.tokens < 0 || !a.inv_freq || !valid_tensor(a.q) ||
      !valid_tensor(a.k) || (!a.positions && a.seq_len <= 0)) {
    return cudaErrorInvalidValue;
  }
  if (a.tokens == 0 || (!a.q.in && !a.k.in)) return cudaSuccess;
  const RopeView q = view(a.q, a.head_dim), k = view(a.k, a.head_dim);
  return dispatch_act(a.dtype, [&](auto act) -> cudaError_t {
    using T = typename decltype(act)::type;
    auto launch = [&](auto vec_tag) {
      constexpr int kV = decltype(vec_tag)::value;
      const int64_t work = a.tokens * (a.head_dim / kV);
      const int blocks =
          static_cast<int>(std::min<int64_t>(ceil_div(work, kRopeThreads), int64_t{multiprocessor_count()} * 16));
      rope_kernel<T, kV><<<blocks, kRopeThreads, 0, stream>>>(q, k, a.inv_freq, a.positions, a.tokens, a.seq_len,
                                                              a.head_dim, direction);
      return launch_status();
    };
    if (rope_vectorised<T>(a.head_dim, q, k)) return launch(std::integral_constant<int, kVec16<T>>{});
    return launch(std::integral_constant<int, 2>{});
  });
}

}  // namespace
}  // namespace detail

cudaError_t rope_forward(const RopeArgs& args, cudaStream_t stream) { return detail::rope(args, 1.f, stream); }

cudaError_t rope_backward(const RopeArgs& args, cudaStream_t stream) { return detail::rope(args, -1.f, stream); }

}  // namespace dtrain::kernels
