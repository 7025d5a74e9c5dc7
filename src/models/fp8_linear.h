// FP8 products for the transformer blocks' linear layers (--precision fp8):
// tensorwise dynamic ("current") scaling, as torchao's float8 training and
// Transformer Engine's current scaling do. The head, the embeddings, the
// norms, attention and the loss stay in bf16.
//
// Contract:
// - Fp8Scope opens a thread-local scope (scopes nest; AutocastGuard opens
//   one for Precision::kFp8 beside bf16 autocast). Inside it ops::linear
//   (and the tensor-parallel products built on it) computes x Wᵀ through
//   fp8Linear for CUDA tensors whose three dimensions are multiples of 16
//   (cuBLASLt's condition); other products are unchanged. Activation
//   checkpointing's recomputation reopens the scope its forward ran in.
// - fp8Linear(x, W, bias): forward casts x and W to e4m3, each with the
//   scale fp8Scale(amax, 448) of its own absolute maximum at the time, and
//   multiplies them (cuBLASLt; its fast accumulation in forward, as
//   torchao's default) into bf16 (as a product under autocast), bias added;
//   x's gradient comes in x's dtype. Backward casts the output's gradient to e5m2 (scale from its
//   amax, 57344) and computes x's gradient (g W) and W's (gᵀ x) from the
//   saved e4m3 copies, W's in W's dtype; the bias's gradient is g's column
//   sums. Nothing waits on the host: a step stays capturable.
// - fp8Scale(amax, max) = max / max(amax, 1e-12) in float32: the largest
//   value maps to the format's largest; an all-zero tensor gets a finite
//   scale (and casts to zeros); an infinite or NaN amax gives a scale of 0
//   or NaN, so the product is non-finite and the step's loss says so.
// - fp8Unsupported(device) is why FP8 cannot run on `device` (empty when it
//   can): a CPU, a GPU below compute capability 8.9 (its name and
//   capability), or a libtorch without float8 products (below 2.5), or a
//   build without CUDA.
#pragma once

#include <string>

#include <torch/torch.h>

#include "models/fp8_recipe.h"

namespace dtrain::models {

inline constexpr double kFp8E4m3Max = 448.0;
inline constexpr double kFp8E5m2Max = 57344.0;

class Fp8Scope {
 public:
  Fp8Scope();
  ~Fp8Scope();
  Fp8Scope(const Fp8Scope&) = delete;
  Fp8Scope& operator=(const Fp8Scope&) = delete;
  static bool active();
};

torch::Tensor fp8Scale(const torch::Tensor& amax, double max);

// Whether fp8Linear takes this product (inside a scope, CUDA, sizes).
bool fp8Takes(const torch::Tensor& x, const torch::Tensor& weight);
torch::Tensor fp8Linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

std::string fp8Unsupported(torch::Device device);

// The recipe of every FP8 product of this process (--fp8-recipe; one job
// per process): tensorwise (the contract above) by default. Rowwise casts
// each operand twice, once scaled per row and once per column
// (kernels/fp8_cast.h's fp8_cast_axiswise), so that each product's scales
// run along its outer dimensions: forward x (per token) times W (per
// output channel), backward g (per token) times W (per input channel) for
// x's gradient and gᵀ (per output channel) times x (per input channel) for
// W's; the products come out in bf16 (all cuBLASLt's row-scaled products
// give), so W's gradient is returned for autograd to add rather than
// written into a stale slot.
void setFp8Recipe(Fp8Recipe recipe);
Fp8Recipe fp8Recipe();
// Why `recipe` cannot run on `device` ("" when it can): fp8Unsupported's
// reasons, and rowwise below compute capability 9.0.
std::string fp8RecipeUnsupported(Fp8Recipe recipe, torch::Device device);

// Absolute maxima written by a tensor's producer, so that its cast reads
// the tensor once (the scaled cast) instead of twice (an absolute-maximum
// pass first): the fused optimizer's step for the weights, the norm and
// SwiGLU kernels for the activations and their gradients.
// - noteAbsoluteMaximum(t, amax_bits): amax_bits, one int32 on t's device,
//   holds (once the work queued before the next use of t on its stream
//   has run) the bit pattern of max |t| over t's elements as they are now:
//   non-negative float32s order as their bit patterns, a NaN above
//   infinity, so producers keep it with an integer atomic max.
// - A note holds while t's storage lives and t's version is unchanged: a
//   write in place (which bumps the version) or a freed storage ends it.
//   A fused optimizer's kernel writes parameters without bumping their
//   versions, so it notes them again after each step it computed them in.
//   Views share the note: the cast finds it by data pointer, element
//   count, dtype, storage and version.
// - notedAbsoluteMaximum(t): the note's amax_bits, or undefined. FP8's
//   casts (fp8Linear) use it; the result is bit for bit the two-pass cast.
// - forgetAbsoluteMaxima(): drops every note (parameters restored from a
//   checkpoint by their data, tests).
// - setNotedAbsoluteMaximaEnabled(false) (tests: the same bits either way)
//   makes every cast measure its own maximum: notedAbsoluteMaximum returns
//   undefined, and producers that ask notedAbsoluteMaximaEnabled() write
//   none. On by default; DTRAIN_FP8_NOTED_MAXIMA=0 turns it off for the
//   process (A/B comparisons of speed).
// Thread-safe.
void noteAbsoluteMaximum(const torch::Tensor& t, const torch::Tensor& amax_bits);
torch::Tensor notedAbsoluteMaximum(const torch::Tensor& t);
void forgetAbsoluteMaxima();
void setNotedAbsoluteMaximaEnabled(bool enabled);
bool notedAbsoluteMaximaEnabled();
// How many casts took a noted maximum and how many measured their own,
// since the process started (tests and the step's breakdown).
struct AbsoluteMaximumCounts {
  int64_t noted = 0;
  int64_t measured = 0;
};
AbsoluteMaximumCounts absoluteMaximumCounts();

}  // namespace dtrain::models
