// The boundary conversion of CUDA runtime return codes (floor 1, header
// only). Include from code built with the CUDA toolkit: comm/nccl/, bench/,
// and the CUDA paths of train/ and models/.
#pragma once

#include <cuda_runtime_api.h>

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
