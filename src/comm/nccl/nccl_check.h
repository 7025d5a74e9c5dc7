// The boundary conversion of NCCL return codes (private to comm/nccl/).
#pragma once

#include <nccl.h>

#include <string>

#include "common/error.h"

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
