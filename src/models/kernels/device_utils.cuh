// Device-side helpers of the fused kernels (CUDA sources of this folder only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "models/kernels/kernel_types.h"

namespace dtrain::kernels::detail {

using bf16 = __nv_bfloat16;

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_float<bf16>(bf16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float v) {
  return __float2bfloat16_rn(v);
}

// N elements moved as one access of sizeof(T) * N bytes (16 for the vector path).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, N>*>(p);
}

template <typename T, int N>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, N>& v) {
  *reinterpret_cast<Pack<T, N>*>(p) = v;
}

// Loads N elements of T as floats, in accesses of at most 16 bytes (so only
// 16-byte alignment is ever needed).
template <typename T, int N>
__device__ __forceinline__ void load_floats(const T* p, float (&out)[N]) {
  constexpr int kChunk = sizeof(T) * N > 16 ? 16 / static_cast<int>(sizeof(T)) : N;
#pragma unroll
  for (int i = 0; i < N; i += kChunk) {
    Pack<T, kChunk> pk = load_pack<T, kChunk>(p + i);
#pragma unroll
    for (int j = 0; j < kChunk; ++j) out[i + j] = to_float(pk.v[j]);
  }
}

template <typename T, int N>
__device__ __forceinline__ void store_floats(T* p, const float (&in)[N]) {
  constexpr int kChunk = sizeof(T) * N > 16 ? 16 / static_cast<int>(sizeof(T)) : N;
#pragma unroll
  for (int i = 0; i < N; i += kChunk) {
    Pack<T, kChunk> pk;
#pragma unroll
    for (int j = 0; j < kChunk; ++j) pk.v[j] = from_float<T>(in[i + j]);
    store_pack<T, kChunk>(p + i, pk);
  }
}

// N elements of T kept as they are in memory (converted on use), loaded in
// accesses of at most 16 bytes.
template <typename T, int N>
struct Raw {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ void load_raw(const T* p, Raw<T, N>& out) {
  constexpr int kChunk = sizeof(T) * N > 16 ? 16 / static_cast<int>(sizeof(T)) : N;
#pragma unroll
  for (int i = 0; i < N; i += kChunk) {
    Pack<T, kChunk> pk = load_pack<T, kChunk>(p + i);
#pragma unroll
    for (int j = 0; j < kChunk; ++j) out.v[i + j] = pk.v[j];
  }
}

// Elements of T in one 16-byte access.
template <typename T>
inline constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

// Butterfly reductions: every lane ends with the same value (fp addition is
// commutative, so partners combine identical operands), in a fixed order.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Absolute maxima written beside an output (the amax_bits of the norm and
// SwiGLU kernels): the bit pattern of |v| for a value v as stored. Non-
// negative floats order as their bit patterns (a NaN above infinity), so
// an unsigned maximum of these is the bit pattern of the absolute maximum.
__device__ __forceinline__ uint32_t abs_bits(float v) { return __float_as_uint(v) & 0x7fffffffu; }

// Folds every lane's bits into *amax_bits: the warp's unsigned maximum,
// then one atomicMax by its first lane, skipped when the slot already holds
// as much (during a kernel the slot only grows, so an old value read there
// costs at most an atomic, never a wrong result; the read goes to L2, where
// the atomics land). All 32 lanes of the warp must call it.
__device__ __forceinline__ void note_warp_amax(uint32_t bits, uint32_t* amax_bits) {
#if __CUDA_ARCH__ >= 800
  bits = __reduce_max_sync(0xffffffffu, bits);
#else
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) bits = max(bits, __shfl_xor_sync(0xffffffffu, bits, o));
#endif
  const unsigned lane = (threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y) & 31u;
  if (lane == 0 && bits > __ldcg(amax_bits)) atomicMax(amax_bits, bits);
}

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<Act>{}, TypeTag<Param>{}) for the accepted dtype pairs.
template <typename F>
cudaError_t dispatch_act_param(DType act, DType param, F&& f) {
  if (act == DType::kFloat32 && param == DType::kFloat32) return f(TypeTag<float>{}, TypeTag<float>{});
  if (act == DType::kBFloat16 && param == DType::kBFloat16) return f(TypeTag<bf16>{}, TypeTag<bf16>{});
  if (act == DType::kBFloat16 && param == DType::kFloat32) return f(TypeTag<bf16>{}, TypeTag<float>{});
  return cudaErrorInvalidValue;
}

template <typename F>
cudaError_t dispatch_act(DType act, F&& f) {
  if (act == DType::kFloat32) return f(TypeTag<float>{});
  if (act == DType::kBFloat16) return f(TypeTag<bf16>{});
  return cudaErrorInvalidValue;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The vector width for these pointers: 16-byte accesses of T when channels
// and every (non-null) pointer allow, else 1.
template <typename T>
bool vector_path(int channels, std::initializer_list<const void*> ptrs) {
  if (channels % kVec16<T> != 0) return false;
  for (const void* p : ptrs) {
    if (!aligned16(p)) return false;
  }
  return true;
}

// Calls f(std::integral_constant<int, VEC>) with the vector width.
template <typename T, typename F>
cudaError_t with_vec(bool vec, F&& f) {
  if (vec) return f(std::integral_constant<int, kVec16<T>>{});
  return f(std::integral_constant<int, 1>{});
}

inline int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

// Multiprocessors of the current device (read once per process: a process
// drives one kind of GPU). A host query, not a stream operation, so it is
// allowed while a stream is being captured.
inline int multiprocessor_count() {
  static const int count = [] {
    int device = 0, n = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || n <= 0) {
      cudaGetLastError();  // leave no error behind for the launch check
      return 132;
    }
    return n;
  }();
  return count;
}

// Blocks of `kernel` at `threads` threads each that fit on the current
// device at once (0 if the query fails). Like multiprocessor_count, a host
// query, allowed while a stream is being captured; callers read it once
// per kernel.
template <typename Kernel>
int resident_blocks(Kernel kernel, int threads) {
  int per_multiprocessor = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel, threads, 0) != cudaSuccess) {
    cudaGetLastError();  // leave no error behind for the launch check
    return 0;
  }
  return per_multiprocessor * multiprocessor_count();
}

// The launch's error (an invalid configuration, or an earlier asynchronous
// fault), without synchronising.
inline cudaError_t launch_status() { return cudaGetLastError(); }

}  // namespace dtrain::kernels::detail
