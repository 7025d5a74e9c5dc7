// The fused CUDA kernels of models/kernels/ as differentiable torch
// operations: the implementations transformer_ops.cc takes for CUDA tensors
// (and resnet.cc, batchNormAct). Each function returns the result of its
// namesake in transformer_ops.h (same values up to rounding, same dtype,
// gradients to every input), or std::nullopt when it declines the call; the
// caller then runs the libtorch operation. A function declines when
//   - this build has no fused kernels (a CPU libtorch, or no nvcc: the
//     stand-ins of fused_ops_missing.cc decline everything),
//   - DTRAIN_FUSED_KERNELS=0 (models/fused_kernels_setting.h),
//   - its first tensor is not on a CUDA device,
//   - its dtypes or shape are outside what the kernel takes: fp32 and bf16
//     only (never double or fp16, nor fp16 autocast), rows of the norms up to
//     16384 (bf16) / 8192 (fp32) columns, no empty tensors; batch norm
//     only over channels-last (or [N, C]) activations.
// Under bf16 autocast the dtypes are those the libtorch operations get from
// autocast: LayerNorm in fp32 (layer_norm is on autocast's fp32 list), the
// MLP's and the classifier's matrix products in bf16 with the fp32 bias added
// inside the kernel, RMSNorm/SwiGLU/rotary and batch norm (fp32 parameters
// and statistics) in their inputs' dtype.
//
// Every result is deterministic (fixed reduction orders, no atomics), every
// workspace comes from torch's caching allocator, and nothing reads the
// device on the host, so a forward + backward can be captured into a CUDA
// graph. Differences from the libtorch operations beyond rounding:
//   - applyRotary computes each angle as fp32 position x fp32 frequency (Meta's
//     reference does the same); the libtorch table is computed in double, so
//     the two drift apart by ~1e-3 rad at position 8192.
//   - batchNormAct rounds once (BN, the residual add and the ReLU in fp32);
//     the libtorch path rounds the BN output and the sum to the activation
//     dtype (bf16 under autocast) before the next step.
//   - classifierCrossEntropy computes the gradients of hidden and weight in
//     its forward (chunks of rows: logits in the compute dtype, the loss and
//     dlogits by the kernel, then the two gradient products), so the full
//     logits never exist; its backward scales them by the incoming gradient,
//     in place: the graph can be run backward once (retain_graph is refused).
#pragma once

#include <optional>

#include <torch/torch.h>

#include "models/transformer_ops.h"

namespace dtrain::models::fused {

// Whether this build has the fused kernels (a CUDA libtorch and dtrain_kernels).
bool compiledIn();
// compiledIn(), the setting on, and x on a CUDA device.
bool activeFor(const torch::Tensor& x);

std::optional<torch::Tensor> layerNorm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                       double eps);
std::optional<ops::ResidualAndNormed> addLayerNorm(const torch::Tensor& residual, const torch::Tensor& update,
                                                   const torch::Tensor& weight, const torch::Tensor& bias, double eps);
std::optional<torch::Tensor> rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
std::optional<ops::ResidualAndNormed> addRmsNorm(const torch::Tensor& residual, const torch::Tensor& update,
                                                 const torch::Tensor& weight, double eps);

// x Wᵀ (+ bias) under bf16 autocast: autocast's dtypes and cuBLAS products
// (the bias in the product's epilogue), as libtorch's linear, but the
// backward writes W's gradient through models::weightGradient (in fp32,
// straight into the parameter's gradient buffer where its owner lets it).
// Declines without bf16 autocast, with DTRAIN_FUSED_PRODUCTS=0, and for x
// of fewer than 2 dimensions.
std::optional<torch::Tensor> linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
// x Wᵢᵀ for two or three weights (no biases) over one input, as linear
// does each, but backward makes one d(x) inside the products (beta 1)
// instead of one per weight that autograd adds up. Declines as linear does.
std::optional<std::vector<torch::Tensor>> sharedInputLinears(const torch::Tensor& x,
                                                             const std::vector<torch::Tensor>& weights);
// x Wᵀ by cuBLAS (detail::product), then bias + GELU (tanh) in one kernel.
std::optional<torch::Tensor> linearGelu(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
// GPT-2's MLP: gelu(x W1ᵀ + b1) W2ᵀ + b2; the GELU's output is written
// again in the backward (by the GELU gradient's kernel) instead of being
// kept from the forward, as torch.compile's partitioner does.
std::optional<torch::Tensor> geluMlp(const torch::Tensor& x, const torch::Tensor& fc_weight,
                                     const torch::Tensor& fc_bias, const torch::Tensor& proj_weight,
                                     const torch::Tensor& proj_bias);
std::optional<torch::Tensor> swiglu(const torch::Tensor& gate, const torch::Tensor& up);
// Needs the table's inv_freq (ops::rotaryTable fills it).
std::optional<torch::Tensor> applyRotary(const torch::Tensor& x, const ops::RotaryTable& table);

// Mean cross-entropy (ignore index -100, as torch's) of hidden Wᵀ against
// int64 targets, chunk by chunk; a float32 scalar.
std::optional<torch::Tensor> classifierCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                                    const torch::Tensor& targets);

// act(batch_norm(x) [+ residual]) with act = ReLU or identity: what
// torch::batch_norm(x, weight, bias, running_mean, running_var, training,
// momentum, eps) followed by `+ residual` and torch::relu computes, in one
// statistics pass and one apply pass (models/kernels/batch_norm.h). In
// training the batch statistics normalise and running_mean/running_var are
// updated in place as torch's (momentum; unbiased running variance); in eval
// the running statistics normalise. The caller (a BatchNorm module) bumps
// its num_batches_tracked itself. Gradients reach x, residual, weight and
// bias. Takes x of 4 dimensions in the channels-last memory format, or of 2
// dimensions [N, C] contiguous, in fp32 or bf16 (under bf16 autocast the
// input's dtype, as libtorch's batch_norm, which autocast leaves alone);
// weight and bias fp32 or x's dtype; running statistics fp32 [C]; residual
// undefined or of x's shape, dtype and strides. Declines anything else, and
// a training call over one value per channel (libtorch raises its error).
std::optional<torch::Tensor> batchNormAct(const torch::Tensor& x, const torch::Tensor& residual,
                                          const torch::Tensor& weight, const torch::Tensor& bias,
                                          torch::Tensor& running_mean, torch::Tensor& running_var, bool training,
                                          double momentum, double eps, bool relu);

// torch::max_pool2d(x, kernel, stride, padding) with square windows,
// dilation 1 and ceil_mode false (a caller with others runs libtorch's):
// ResNet's stem. Takes x of 4 dimensions in the channels-last memory
// format, fp32 or bf16, kernel 1..8, stride >= 1 and 0 <= padding <=
// kernel / 2 (torch's bound) with a non-empty output; declines anything
// else (libtorch then raises its own errors). The output is channels-last
// in x's dtype, with libtorch's values; the gradient is libtorch's too
// (the same scan: first maximum, NaN wins; the same fp32 sums in the same
// order), except for a window of -inf values only, whose gradient goes to
// its first in-bounds element (libtorch's channels-last kernel sends it to
// the image's element (0, 0)). Saves a one-byte argmax per output element,
// not x nor int64 indices. resnet.cc takes it for the ImageNet stem.
std::optional<torch::Tensor> maxPool2d(const torch::Tensor& x, int64_t kernel, int64_t stride, int64_t padding);

// x cast to float8 (e4m3, or e5m2 when `e5m2`) with its tensorwise scale, in
// two passes (models/kernels/fp8_cast.h): the bits of fp8_linear's libtorch
// composition. data has x's shape (x's values, contiguous, scaled); scale
// and inverse (1 / scale) are float32 scalars on x's device. No autograd.
// Takes fp32 or bf16 x of at least one element on a CUDA device, in a
// libtorch with float8 types; declines anything else.
struct Fp8Cast {
  torch::Tensor data;
  torch::Tensor scale;
  torch::Tensor inverse;
  torch::Tensor transposed;  // fp8CastTransposed only: data's transpose, contiguous
  torch::Tensor transposed_inverse;  // fp8CastAxiswise only: the inverses of transposed's rows' scales
};
std::optional<Fp8Cast> fp8Cast(const torch::Tensor& x, bool e5m2);
// The cast of a 2-D x [rows, cols] with its transpose [cols, rows] written
// in the same pass (the layout Hopper's FP8 products take for a second
// operand), bit for bit data.t().contiguous(). Declines, besides what
// fp8Cast declines, x not 2-D or with rows or cols not multiples of 16.
// With amax_bits (one int32 on x's device: the bit pattern of max |x|,
// noteAbsoluteMaximum's), the scale comes from it and x is read once.
std::optional<Fp8Cast> fp8CastTransposed(const torch::Tensor& x, bool e5m2,
                                         const torch::Tensor& amax_bits = torch::Tensor());
// The axiswise (rowwise) cast of a 2-D x [rows, cols] (kernels/fp8_cast.h's
// fp8_cast_axiswise): data e4m3 with a scale per row, transposed [cols,
// rows] e4m3 with a scale per column of x; inverse [rows] and
// transposed_inverse [cols] float32 (scale unset). Declines as
// fp8CastTransposed.
std::optional<Fp8Cast> fp8CastAxiswise(const torch::Tensor& x);

}  // namespace dtrain::models::fused
