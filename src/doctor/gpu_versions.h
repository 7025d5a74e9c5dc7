// The software versions behind the GPUs (doctor/): the CUDA version the
// driver supports against the CUDA runtime's, and NCCL's. Both libraries are
// opened with dlopen: dtrain does not link them.
#pragma once

#include "doctor/check.h"

namespace dtrain::doctor {

// gpu.cuda: nvmlSystemGetCudaDriverVersion_v2 against cudaRuntimeGetVersion
// of DTRAIN_CUDART_LIBRARY, else libcudart.so.13, .so.12, .so.
CheckResult checkCudaVersions(const DoctorContext& ctx);
// gpu.nccl: ncclGetVersion of DTRAIN_NCCL_LIBRARY, else libnccl.so.2.
CheckResult checkNcclVersion(const DoctorContext& ctx);

}  // namespace dtrain::doctor
