#include "models/fused_kernels_setting.h"

#include "common/settings.h"

namespace dtrain::models {
namespace {

DTRAIN_SETTING(bool, kFusedKernels, "fused-kernels", "DTRAIN_FUSED_KERNELS", true,
               "Whether CUDA tensors take dtrain's fused kernels (residual + norm, bias + GELU, SwiGLU, rotary, "
               "chunked classifier + cross-entropy, AdamW) in builds that have them; 0 runs the plain libtorch "
               "operations.");

}  // namespace

bool fusedKernelsSetting() { return kFusedKernels.get(); }

}  // namespace dtrain::models
