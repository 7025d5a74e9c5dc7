// What a checkpoint holds, read without libtorch, for the tests that run
// `dtrain train` as a process and compare the checkpoints it wrote: the
// meta and every logical tensor as its stored bytes. A sharded checkpoint
// is first consolidated into one file by `dtrain checkpoint consolidate`
// (which verifies it), so the tensors are whole and row-major either way.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_file.h"

namespace dtrain::testing {

struct StoredTensor {
  CheckpointDtype dtype = CheckpointDtype::kFloat32;
  std::vector<int64_t> shape;
  std::vector<char> bytes;

  int64_t numel() const;
  // Element i as a double (floating-point and integer dtypes).
  double value(int64_t i) const;
  // Same dtype, shape and bits.
  bool operator==(const StoredTensor& other) const = default;
};

struct CheckpointView {
  nlohmann::json meta = nlohmann::json::object();
  std::map<std::string, StoredTensor> tensors;
};

// A checkpoint file, or a sharded checkpoint's directory. A failure (a
// file that does not verify, a consolidation that fails) throws with the
// reason and the command's output.
CheckpointView readCheckpoint(const std::string& path);

// The largest |a - b| over the elements of two tensors of one shape, and
// the largest |b|.
struct TensorDifference {
  double largest = 0, scale = 0;
};
TensorDifference differenceOf(const StoredTensor& a, const StoredTensor& b);

}  // namespace dtrain::testing
