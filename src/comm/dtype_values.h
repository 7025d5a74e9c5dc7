// Reading and writing single elements of any DType as double, for references
// and checks on the host (tests, `dtrain bench -c`). Half and bfloat16 use
// round-to-nearest-even; integers truncate toward zero and wrap like a C cast.
#pragma once

#include <cstddef>

#include "comm/types.h"

namespace dtrain {

double loadElement(const void* data, size_t index, DType dtype);
void storeElement(void* data, size_t index, DType dtype, double value);

}  // namespace dtrain
