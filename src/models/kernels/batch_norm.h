// Fused batch normalisation (+ residual add) (+ ReLU) over channels-last
// activations, forward and backward: ResNet's BN -> (+ shortcut) -> ReLU.
//
// x is viewed as [rows, channels] with channels contiguous (NHWC: rows =
// N*H*W, channels = C; a 2-D [N, C] input as it is). Activations (x,
// residual, y, dy, dx, dresidual) are fp32 or bf16 (act_dtype); weight,
// bias, the running statistics and the saved statistics are fp32; all
// arithmetic is fp32.
//
// Training forward, per channel c over all M = rows rows:
//   mean = sum(x)/M,  var = sum((x-mean)^2)/M (biased, for normalising),
//   invstd = 1/sqrt(var + eps)
//   running_mean = (1-momentum) running_mean + momentum mean
//   running_var  = (1-momentum) running_var  + momentum var M/(M-1)   (torch's update, unbiased)
//   save_mean = mean, save_invstd = invstd
//   y = act(weight (x-mean) invstd + bias [+ residual]),  act = ReLU or identity
// Eval forward: the same y with mean = running_mean, invstd = 1/sqrt(running_var + eps)
// (the running statistics are not changed; save_mean/save_invstd, when
// given, receive those two so that backward can run in eval mode too).
// Backward, given dy, x and ReLU's mask, y > 0: read from the forward's
// output y, or (no residual added: y is not needed) recomputed from x as
// weight (x - mean) invstd + bias > 0 with the forward's arithmetic:
//   g = dy (masked with ReLU),  xhat = (x - mean) invstd
//   dbias = sum g,  dweight = sum g xhat
//   training: dx = weight invstd (g - dbias/M - xhat dweight/M)
//   eval:     dx = weight invstd g                  (the statistics are constants)
//   dresidual = g (when the forward added a residual; null: not written)
//
// Passes over memory: the training forward reads x twice (statistics, then
// the apply, which also reads the residual and writes y); backward reads dy
// and x (and y, with ReLU after a residual add) twice (the sums, then dx)
// and writes dx (and dresidual).
//
// The statistics are a two-level reduction in a fixed order: each block
// leaves one (mean, M2) partial per channel in the workspace (a per-thread
// shifted sum, then Chan's merge over the block's threads), and a second
// kernel merges the partials of each channel in a fixed order (Chan's
// formula: no cancellation of E[x^2] - E[x]^2). The backward's sums leave
// fp32 partials that are added column by column in a fixed order. No
// atomics: the same inputs give the same bits on every run.
//
// How the torch side calls them: forward with workspace =
// batch_norm_workspace_size(rows, channels) bytes, save_mean/save_invstd
// fresh [channels] fp32 tensors; save x, weight, save_mean, save_invstd,
// and for ReLU y (after a residual add) or bias (without one). Backward with the same workspace size; dweight/dbias are
// always written (dx needs them).
//
// Limits: training needs rows >= 2 (the unbiased running variance; torch
// refuses one value per channel too): rows < 2 is rejected with
// cudaErrorInvalidValue. channels >= 1, any count; 16-byte aligned tensors
// and channels divisible by 8 (bf16) / 4 (fp32) take the vector path.
// Aliasing: y may alias x or residual, and dx or dresidual may alias dy, y
// or x: the last pass of each reads every element and writes it in the same
// thread, after the reductions. dx and dresidual must not alias each other.
#pragma once

#include "models/kernels/kernel_types.h"

namespace dtrain::kernels {

struct BatchNormForwardArgs {
  const void* x = nullptr;         // [rows, channels], act_dtype
  const void* residual = nullptr;  // [rows, channels], act_dtype, or null (no add)
  const float* weight = nullptr;   // [channels]
  const float* bias = nullptr;     // [channels]
  void* y = nullptr;               // [rows, channels], act_dtype
  float* running_mean = nullptr;   // [channels]: updated in training, read in eval
  float* running_var = nullptr;    // [channels]: updated in training, read in eval
  float* save_mean = nullptr;      // [channels]: written (training: required; eval: optional)
  float* save_invstd = nullptr;    // [channels]: written (training: required; eval: optional)
  void* workspace = nullptr;       // batch_norm_workspace_size(rows, channels) bytes (training only)
  size_t workspace_bytes = 0;
  int64_t rows = 0;
  int channels = 0;
  float eps = 1e-5f;
  float momentum = 0.1f;
  bool training = true;
  bool relu = false;
  DType act_dtype = DType::kBFloat16;
};

struct BatchNormBackwardArgs {
  const void* dy = nullptr;        // [rows, channels], act_dtype
  const void* y = nullptr;         // [rows, channels]: the forward's output (read with relu only), or null
  const float* bias = nullptr;     // [channels]: with relu and no y, the mask is recomputed from x
  const void* x = nullptr;         // [rows, channels]: the forward's input
  const float* weight = nullptr;   // [channels]
  const float* mean = nullptr;     // [channels]: the forward's save_mean
  const float* invstd = nullptr;   // [channels]: the forward's save_invstd
  void* dx = nullptr;              // [rows, channels], act_dtype
  void* dresidual = nullptr;       // [rows, channels], act_dtype, or null: g written again
  float* dweight = nullptr;        // [channels], overwritten
  float* dbias = nullptr;          // [channels], overwritten
  void* workspace = nullptr;       // batch_norm_workspace_size(rows, channels) bytes
  size_t workspace_bytes = 0;
  int64_t rows = 0;
  int channels = 0;
  bool training = true;  // false: the forward used the running statistics (constants)
  bool relu = false;
  DType act_dtype = DType::kBFloat16;
};

cudaError_t batch_norm_forward(const BatchNormForwardArgs& args, cudaStream_t stream);
cudaError_t batch_norm_backward(const BatchNormBackwardArgs& args, cudaStream_t stream);

// Bytes of workspace the training forward and the backward need for this
// shape (a function of the shape alone).
size_t batch_norm_workspace_size(int64_t rows, int channels);

}  // namespace dtrain::kernels
