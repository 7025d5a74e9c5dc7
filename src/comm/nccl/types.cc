#include "comm/nccl/types.h"

#include <string>

#include "common/error.h"

namespace dtrain {

ncclDataType_t toNcclDataType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
    case DType::kFloat16: return ncclFloat16;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
    case DType::kUInt8: return ncclUint8;
  }
  throw ConfigError("nccl does not support DType value " + std::to_string(static_cast<int>(dtype)));
}

ncclRedOp_t toNcclRedOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kProd: return ncclProd;
  }
  throw ConfigError("nccl does not support ReduceOp value " + std::to_string(static_cast<int>(op)));
}

}  // namespace dtrain
