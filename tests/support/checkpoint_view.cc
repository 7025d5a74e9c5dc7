#include "tests/support/checkpoint_view.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "tests/support/command.h"
#include "tests/support/temp_dir.h"

namespace dtrain::testing {
namespace {

template <typename T>
double load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return static_cast<double>(v);
}

// IEEE binary16 and bfloat16 widened to float.
double halfValue(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  return sign * std::ldexp(mantissa + 1024, exponent - 25);
}
double bfloat16Value(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

bool isDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

int64_t StoredTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

double StoredTensor::value(int64_t i) const {
  const char* p = bytes.data() + i * static_cast<int64_t>(checkpointDtypeSize(dtype));
  switch (dtype) {
    case CheckpointDtype::kFloat32: return load<float>(p);
    case CheckpointDtype::kFloat64: return load<double>(p);
    case CheckpointDtype::kFloat16: return halfValue(static_cast<uint16_t>(load<uint16_t>(p)));
    case CheckpointDtype::kBFloat16: return bfloat16Value(static_cast<uint16_t>(load<uint16_t>(p)));
    case CheckpointDtype::kInt64: return load<int64_t>(p);
    case CheckpointDtype::kInt32: return load<int32_t>(p);
    case CheckpointDtype::kInt16: return load<int16_t>(p);
    case CheckpointDtype::kInt8: return load<int8_t>(p);
    case CheckpointDtype::kUInt8: return load<uint8_t>(p);
    case CheckpointDtype::kBool: return load<uint8_t>(p) != 0;
  }
  return NAN;
}

CheckpointView readCheckpoint(const std::string& path) {
  std::string file = path;
  TempDir scratch("dtrain-checkpoint-view");
  if (isDirectory(path)) {
    file = scratch / "consolidated.dtck";
    const CommandResult r = runCommand(dtrainBin() + " checkpoint consolidate " + path + " --out " + file + " 2>&1", 120);
    if (r.exit_code != 0) throw std::runtime_error("consolidating " + path + " failed:\n" + r.output);
  }
  const CheckpointFile opened(file);
  opened.verify();
  CheckpointView view;
  view.meta = opened.meta();
  opened.readAll([&](const CheckpointFileEntry& entry) {
    StoredTensor& t = view.tensors[entry.name];
    t.dtype = entry.dtype;
    t.shape = entry.shape;
    t.bytes.resize(entry.bytes);
    return static_cast<void*>(t.bytes.data());
  });
  return view;
}

TensorDifference differenceOf(const StoredTensor& a, const StoredTensor& b) {
  TensorDifference d;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) {
    d.largest = std::max(d.largest, std::fabs(a.value(i) - b.value(i)));
    d.scale = std::max(d.scale, std::fabs(b.value(i)));
  }
  return d;
}

}  // namespace dtrain::testing
