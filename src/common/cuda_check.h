// Boundary conversions for CUDA and NCCL return codes. Include only from code
// built with the NCCL backend (it needs the CUDA and NCCL headers).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "common/error.h"

// Throws CommError naming the call, the CUDA error name and string, and the rank.
#define DTRAIN_CUDA_CHECK(call)                                                \
  do {                                                                         \
    cudaError_t dtrain_cuda_rc_ = (call);                                      \
    if (dtrain_cuda_rc_ != cudaSuccess) {                                      \
      throw ::dtrain::CommError(std::string(#call " failed: ") +               \
                                cudaGetErrorName(dtrain_cuda_rc_) + " (" +     \
                                cudaGetErrorString(dtrain_cuda_rc_) + ")");    \
    }                                                                          \
  } while (0)

// Throws CommError naming the call, the ncclResult_t code, NCCL's own string
// and its last error message, and the rank. ncclInProgress is not a failure
// (non-blocking communicators); callers that care check for it themselves.
#define DTRAIN_NCCL_CHECK(call)                                                \
  do {                                                                         \
    ncclResult_t dtrain_nccl_rc_ = (call);                                     \
    if (dtrain_nccl_rc_ != ncclSuccess && dtrain_nccl_rc_ != ncclInProgress) { \
      throw ::dtrain::CommError(std::string(#call " failed: NCCL error ") +    \
                                std::to_string(static_cast<int>(dtrain_nccl_rc_)) + \
                                " (" + ncclGetErrorString(dtrain_nccl_rc_) +   \
                                "): " + ncclGetLastError(nullptr));            \
    }                                                                          \
  } while (0)
