// The switch of dtrain's fused CUDA kernels, torch-free so that the dtrain
// binary lists it with every other setting (`dtrain settings`).
#pragma once

namespace dtrain::models {

// DTRAIN_FUSED_KERNELS (default on): whether CUDA tensors take the fused
// kernels of models/kernels/ where a build has them, in the transformer
// operations (fused_ops_cuda.h) and in AdamW's capturable step and gradient
// clipping. 0 runs the plain libtorch operations instead (comparisons,
// bisecting a numerical difference). Read once; tests that change the
// environment reset it through the settings registry.
bool fusedKernelsSetting();

// DTRAIN_FUSED_BATCH_NORM (default on): whether ResNets take
// the fused batch-norm (+ residual) (+ ReLU) kernels (models/kernels/
// batch_norm.h) and the stem's max pool (max_pool.h) where
// fusedKernelsSetting() lets them.
bool fusedBatchNormSetting();

// DTRAIN_FP8_NOTED_MAXIMA (default on): whether FP8's casts take noted
// absolute maxima (fp8_linear.h's noteAbsoluteMaximum); 0 measures each
// tensor's in a pass of its own, with the same bits (A/B comparisons).
bool fp8NotedMaximaSetting();

// DTRAIN_FUSED_PRODUCTS (default on): whether the linear layers' bf16
// products on CUDA (under autocast) run as dtrain's own autograd function
// over cuBLAS, whose backward writes each weight gradient in fp32 straight
// into the gradient buffer (fused_ops_cuda.h's linear); 0 runs libtorch's
// linear (a bf16 gradient, then a cast and a copy).
bool fusedProductsSetting();

// DTRAIN_NATIVE_GQA (default on): whether attention with fewer key/value
// heads than query heads gives SDPA the key/value heads as they are
// (enable_gqa, libtorch 2.5 and newer); 0 widens them to the query heads
// first (a copy of k and v in forward, a sum in backward).
bool nativeGqaSetting();

}  // namespace dtrain::models
