#include "comm/dtype_values.h"

#include "comm/reduce.h"

#include <cstdint>
#include <cstring>

namespace dtrain {
namespace {

template <typename T>
T load(const void* data, size_t index) {
  T value;
  std::memcpy(&value, static_cast<const char*>(data) + index * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
void store(void* data, size_t index, T value) {
  std::memcpy(static_cast<char*>(data) + index * sizeof(T), &value, sizeof(T));
}

template <typename T>
T wrapToInteger(double value) {
  // Through int64 so that negative values wrap like a C cast of an integer.
  return static_cast<T>(static_cast<int64_t>(value));
}

}  // namespace

double loadElement(const void* data, size_t index, DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return load<float>(data, index);
    case DType::kFloat64: return load<double>(data, index);
    case DType::kFloat16: return halfBitsToFloat(load<uint16_t>(data, index));
    case DType::kBFloat16: return bfloat16BitsToFloat(load<uint16_t>(data, index));
    case DType::kInt32: return load<int32_t>(data, index);
    case DType::kInt64: return static_cast<double>(load<int64_t>(data, index));
    case DType::kUInt8: return load<uint8_t>(data, index);
  }
  return 0;
}

void storeElement(void* data, size_t index, DType dtype, double value) {
  switch (dtype) {
    case DType::kFloat32: store<float>(data, index, static_cast<float>(value)); break;
    case DType::kFloat64: store<double>(data, index, value); break;
    case DType::kFloat16: store<uint16_t>(data, index, floatToHalfBits(static_cast<float>(value))); break;
    case DType::kBFloat16: store<uint16_t>(data, index, floatToBfloat16Bits(static_cast<float>(value))); break;
    case DType::kInt32: store<int32_t>(data, index, wrapToInteger<int32_t>(value)); break;
    case DType::kInt64: store<int64_t>(data, index, static_cast<int64_t>(value)); break;
    case DType::kUInt8: store<uint8_t>(data, index, wrapToInteger<uint8_t>(value)); break;
  }
}

}  // namespace dtrain
