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

}  // namespace dtrain::models
