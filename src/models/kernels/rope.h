// Rotary position embeddings (RoPE), Meta Llama's convention, forward and
// backward, applied to q and k of [tokens, heads, head_dim] in one launch.
//
// Convention (Meta's reference apply_rotary_emb, which views ADJACENT pairs
// as complex numbers): within each head, for i < head_dim / 2,
//   angle = fl32(pos * inv_freq[i])           (fp32 product, as Meta's
//                                               torch.outer in fp32)
//   out[2i]   = x[2i] cos(angle) - x[2i+1] sin(angle)
//   out[2i+1] = x[2i] sin(angle) + x[2i+1] cos(angle)
// NOT the split-halves (rotate_half) layout of Hugging Face transformers:
// weights taken from a Hugging Face checkpoint need wq/wk rows permuted back
// to Meta's order (the inverse of HF's convert_llama_weights_to_hf permute).
// Backward is the rotation by -angle (the transpose): dx = R(-angle) dout.
//
// Layout: token r (r < tokens = batch * seq_len, batch-major) of q starts at
// q.in + r * in_token_stride and holds heads * head_dim elements, head h at
// h * head_dim; so q and k may be slices of one fused qkv projection
// [tokens, (hq + 2 hkv) * head_dim] (in_token_stride = (hq + 2 hkv) * head_dim,
// k.in = q.in + hq * head_dim). out may equal in (in place, with equal strides)
// or be a separate tensor with its own token stride.
// Positions: positions[r] (int32, device) when given, else r % seq_len.
// inv_freq: [head_dim / 2] fp32 on the device, from rope_inverse_frequencies()
// (copied once at model set-up). Nothing needs saving for backward besides
// what forward got (inv_freq, positions).
#pragma once

#include <vector>

#include "models/kernels/kernel_types.h"

namespace dtrain::kernels {

struct RopeTensor {
  const void* in = nullptr;  // null: this tensor is skipped
  void* out = nullptr;
  int heads = 0;
  int64_t in_token_stride = 0;   // elements between tokens; 0 = heads * head_dim
  int64_t out_token_stride = 0;  // 0 = heads * head_dim
};

struct RopeArgs {
  RopeTensor q;
  RopeTensor k;
  const float* inv_freq = nullptr;     // [head_dim / 2], device
  const int32_t* positions = nullptr;  // [tokens], device, or null
  int64_t tokens = 0;
  int seq_len = 0;   // used when positions is null
  int head_dim = 0;  // even
  DType dtype = DType::kBFloat16;
};

// Forward (rotate by +angle); backward takes the gradients of the outputs as
// `in` and writes the gradients of the inputs to `out` (rotate by -angle).
cudaError_t rope_forward(const RopeArgs& args, cudaStream_t stream);
cudaError_t rope_backward(const RopeArgs& args, cudaStream_t stream);

// Llama 3.1's frequency scaling for long contexts (Meta's apply_scaling).
struct RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position = 8192.0;
};

// inv_freq[i] = theta^(-2i / head_dim), i < head_dim / 2 (computed in double,
// rounded to float), then scaled when `scaling` is given. Llama 3: theta =
// 500000 with RopeScaling{}; Llama 2: theta = 10000, no scaling. Host only.
std::vector<float> rope_inverse_frequencies(int head_dim, double theta, const RopeScaling* scaling = nullptr);

}  // namespace dtrain::kernels
