// The collective layer's vocabulary (comm/types.h) in NCCL's terms.
#pragma once

#include <nccl.h>

#include "comm/types.h"

namespace dtrain {

// Every DType and ReduceOp has an NCCL equivalent (avg is ncclAvg, which NCCL
// computes as a pre-scaled sum for floating types and as sum-then-divide for
// integers).
ncclDataType_t toNcclDataType(DType dtype);
ncclRedOp_t toNcclRedOp(ReduceOp op);

}  // namespace dtrain
