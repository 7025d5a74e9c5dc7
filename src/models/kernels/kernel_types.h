// Types shared by the fused CUDA kernels of models/kernels/ (no torch, no
// CUDA-only types: this header and the kernel headers compile with g++).
//
// Conventions of every kernel in this folder:
// - Tensors are raw device pointers, row-major and contiguous unless an
//   argument names a stride. bf16 tensors are passed as void* and carry
//   __nv_bfloat16 bit patterns (uint16_t on the host); DType says which.
// - Activations (x, y, gradients of activations) have the "activation dtype",
//   parameters (weight, bias and their gradients) the "parameter dtype". The
//   pairs accepted are (fp32, fp32), (bf16, bf16) and (bf16 activations, fp32
//   parameters); statistics (mean, rstd, losses) are always fp32. All
//   arithmetic is fp32.
// - Every function only enqueues work on `stream` and returns the launch's
//   cudaError_t (cudaErrorInvalidValue for arguments it rejects, before
//   anything is enqueued). None synchronises, allocates or reads device
//   memory on the host, so every call can be captured into a CUDA graph.
//   Functions that need scratch memory take a caller-owned workspace whose
//   size a *_workspace_size() function returns; it must be 16-byte aligned
//   (cudaMalloc and torch's allocator give 256) and must not be used by
//   other work until the call's kernels have finished on `stream`.
// - 16-byte aligned pointers and row lengths divisible by 8 (bf16) or 4
//   (fp32) take the vectorised path (128-bit loads); anything else takes a
//   slower scalar path with the same results.
// - Results are deterministic: the same arguments give the same bits on
//   every run (no floating-point atomics; every reduction has a fixed order;
//   the absolute maxima some kernels note take integer atomicMax, whose
//   result no order changes).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace dtrain::kernels {

enum class DType : uint8_t { kFloat32, kBFloat16 };

// The host type of one bf16 element (its bit pattern).
using bf16_bits = uint16_t;

inline constexpr size_t dtype_size(DType t) { return t == DType::kFloat32 ? 4 : 2; }

inline constexpr const char* dtype_name(DType t) { return t == DType::kFloat32 ? "fp32" : "bf16"; }

}  // namespace dtrain::kernels
