// Fused softmax cross-entropy over the logits of the LM head: the loss of
// each row and, in the same pass, dlogits written over the logits, so no
// fp32 copy of the logits (and no probabilities) ever exists.
//
// Per row r with target t = targets[r] (all arithmetic fp32):
//   lse     = log(sum_{j < vocab} exp(logits[r, j]))   (columns >= vocab are padding: ignored)
//   loss[r] = lse - logits[r, t]
//   dlogits[r, j] = (exp(logits[r, j] - lse) - [j == t]) * scale   for j < vocab
//   dlogits[r, j] = 0                                              for vocab <= j < row_stride
// scale = grad_scale * (*grad_scale_device when given). Rows whose target is
// ignore_index get loss 0 and an all-zero dlogits row. A target outside
// [0, vocab) that is not ignore_index is an error the kernel cannot raise
// (no host syncs): that row gets loss NaN and no -1 term.
//
// How the torch side calls it (the LM head, chunk by chunk over rows so the
// full [rows, vocab] logits never exist at once):
//   for each chunk of rows [r0, r1):
//     logits_chunk = hidden[r0:r1] @ wte^T            (bf16, cuBLAS via torch::mm)
//     cross_entropy_forward_backward(logits = logits_chunk, targets + r0,
//                                    losses + r0, rows = r1 - r0, ...)
//     dhidden[r0:r1] = logits_chunk @ wte;  dwte += logits_chunk^T @ hidden[r0:r1]
//   loss = losses.sum() / (number of rows whose target is not ignore_index)
// The gradient is computed in forward, so grad_scale must already hold the
// backward's factor: 1 / (number of counted rows) for a mean (put it in a
// device scalar and pass grad_scale_device when it is only known on the
// device), times any loss scale; a caller whose autograd graph hands a
// grad_output other than 1 multiplies dhidden/dwte by it afterwards.
// Deterministic: one block per row, fixed reduction order.
#pragma once

#include "models/kernels/kernel_types.h"

namespace dtrain::kernels {

enum class IndexType : uint8_t { kInt32, kInt64 };

struct CrossEntropyArgs {
  void* logits = nullptr;         // [rows, row_stride], activation dtype; overwritten with dlogits
  const void* targets = nullptr;  // [rows], int32 or int64, device
  IndexType target_type = IndexType::kInt64;
  float* losses = nullptr;  // [rows], device: per-row loss (0 where ignored)
  float* lse = nullptr;     // [rows] or null: per-row log-sum-exp
  int64_t rows = 0;
  int vocab = 0;           // real vocabulary: columns counted in the softmax
  int64_t row_stride = 0;  // padded vocabulary (elements per row); 0 = vocab
  int64_t ignore_index = -100;
  float grad_scale = 1.f;
  const float* grad_scale_device = nullptr;  // [1] or null: multiplies grad_scale
  bool write_dlogits = true;                 // false: losses only, logits untouched
  DType dtype = DType::kBFloat16;
};

cudaError_t cross_entropy_forward_backward(const CrossEntropyArgs& args, cudaStream_t stream);

}  // namespace dtrain::kernels
