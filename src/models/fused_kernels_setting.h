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

}  // namespace dtrain::models
