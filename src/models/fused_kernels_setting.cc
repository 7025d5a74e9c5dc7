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

DTRAIN_SETTING(bool, kFusedProducts, "fused-products", "DTRAIN_FUSED_PRODUCTS", true,
               "Whether linear layers' bf16 products on CUDA write their weight gradients in fp32 straight into "
               "the gradient buffer (dtrain's autograd function over cuBLAS, with DTRAIN_FUSED_KERNELS on); 0 runs "
               "libtorch's linear (a bf16 gradient, then a cast and a copy).");

DTRAIN_SETTING(bool, kNativeGqa, "native-gqa", "DTRAIN_NATIVE_GQA", true,
               "Whether grouped-query attention hands SDPA the key/value heads as they are (enable_gqa, libtorch "
               "2.5 and newer) instead of widening them to the query heads first; 0 widens (a copy of k and v).");

}  // namespace

bool fusedProductsSetting() { return kFusedProducts.get(); }

bool nativeGqaSetting() { return kNativeGqa.get(); }

bool fp8NotedMaximaSetting() { return kFp8NotedMaxima.get(); }

bool fusedKernelsSetting() { return kFusedKernels.get(); }

bool fusedBatchNormSetting() { return kFusedBatchNorm.get(); }

}  // namespace dtrain::models
