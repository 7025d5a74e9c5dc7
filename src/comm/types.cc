#include "comm/types.h"

#include <algorithm>
#include <cctype>

#include "common/error.h"

namespace dtrain {
namespace {

struct DTypeSpelling {
  const char* text;
  DType dtype;
};

// nccl-tests' names first (dtypeName() returns these), then the aliases
// people type from PyTorch and NumPy habits.
constexpr DTypeSpelling kDTypeSpellings[] = {
    {"float", DType::kFloat32},   {"double", DType::kFloat64},  {"half", DType::kFloat16},
    {"bfloat16", DType::kBFloat16}, {"int32", DType::kInt32},   {"int64", DType::kInt64},
    {"uint8", DType::kUInt8},     {"f32", DType::kFloat32},     {"float32", DType::kFloat32},
    {"fp32", DType::kFloat32},    {"f64", DType::kFloat64},     {"float64", DType::kFloat64},
    {"fp64", DType::kFloat64},    {"f16", DType::kFloat16},     {"fp16", DType::kFloat16},
    {"float16", DType::kFloat16}, {"bf16", DType::kBFloat16},   {"i32", DType::kInt32},
    {"int", DType::kInt32},       {"i64", DType::kInt64},       {"u8", DType::kUInt8},
};

constexpr ReduceOp kReduceOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                                   ReduceOp::kProd};

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

}  // namespace

size_t dtypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kUInt8: return 1;
  }
  throw ConfigError("unknown DType value " + std::to_string(static_cast<int>(dtype)));
}

const char* dtypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float";
    case DType::kFloat64: return "double";
    case DType::kFloat16: return "half";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
  }
  return "unknown-dtype";
}

DType parseDType(const std::string& text) {
  const std::string key = lowercase(text);
  for (const auto& spelling : kDTypeSpellings) {
    if (key == spelling.text) return spelling.dtype;
  }
  std::string valid;
  for (const auto& spelling : kDTypeSpellings) {
    valid += (valid.empty() ? "" : ", ") + std::string(spelling.text);
  }
  throw ConfigError("'" + text + "' is not a dtype; expected one of " + valid);
}

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProd: return "prod";
  }
  return "unknown-op";
}

ReduceOp parseReduceOp(const std::string& text) {
  const std::string key = lowercase(text);
  for (ReduceOp op : kReduceOps) {
    if (key == reduceOpName(op)) return op;
  }
  throw ConfigError("'" + text + "' is not a reduce op; expected one of sum, avg, min, max, prod");
}

}  // namespace dtrain
