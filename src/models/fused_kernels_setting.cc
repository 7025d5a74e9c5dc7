#include "models/fused_kernels_setting.h"

#include "common/settings.h"

namespace dtrain::models {
namespace {

DTRAIN_SETTING(bool, kFusedKernels, "fused-kernels", "DTRAIN_FUSED_KERNELS", true,
               "Whether CUDA tensors take dtrain's fused kernels (residual + norm, bias + GELU, SwiGLU, rotary, "
               "chunked classifier + cross-entropy, AdamW) in builds that have them; 0 runs the plain libtorch "
               "operations.");

DTRAIN_SETTING(bool, kFusedBatchNorm, "fused-batch-norm", "DTRAIN_FUSED_BATCH_NORM", true,
               "Whether ResNets on CUDA take the fused batch-norm (+ residual add) (+ ReLU) and max-pool kernels "
               "for channels-last bf16/fp32 activations (with DTRAIN_FUSED_KERNELS on); 0 runs libtorch's "
               "batch_norm, add, relu and max_pool2d.");

DTRAIN_SETTING(bool, kFp8NotedMaxima, "fp8-noted-maxima", "DTRAIN_FP8_NOTED_MAXIMA", true,
               "Whether --precision fp8's casts take the absolute maximum that the optimizer's step and the norm "
               "and SwiGLU kernels write beside their output (one pass over the tensor instead of two); 0 measures "
               "it in a pass of its own (the same bits, for comparisons).");

}  // namespace

bool fp8NotedMaximaSetting() { return kFp8NotedMaxima.get(); }

bool fusedKernelsSetting() { return kFusedKernels.get(); }

bool fusedBatchNormSetting() { return kFusedBatchNorm.get(); }

}  // namespace dtrain::models
