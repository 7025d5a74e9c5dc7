// Host buffers of any dtype for collective tests: fill from a function of the
// element index, compare against one.
#pragma once

#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "comm/dtype_values.h"
#include "comm/types.h"

namespace dtrain::testing {

inline Buffer cpuBuffer(void* data, size_t count, DType dtype) {
  return Buffer{data, count, dtype, Device::cpu(), nullptr};
}

inline std::vector<char> filledBuffer(DType dtype, size_t count, const std::function<double(size_t)>& value) {
  std::vector<char> bytes(count * dtypeSize(dtype));
  for (size_t i = 0; i < count; ++i) storeElement(bytes.data(), i, dtype, value(i));
  return bytes;
}

// "" when every element equals expected(i), else a sentence about the first
// one that does not.
inline std::string firstMismatch(const void* data, DType dtype, size_t count,
                                 const std::function<double(size_t)>& expected) {
  for (size_t i = 0; i < count; ++i) {
    const double got = loadElement(data, i, dtype);
    if (got != expected(i)) {
      std::ostringstream os;
      os << dtypeName(dtype) << " element " << i << " is " << got << ", expected " << expected(i);
      return os.str();
    }
  }
  return "";
}

}  // namespace dtrain::testing
