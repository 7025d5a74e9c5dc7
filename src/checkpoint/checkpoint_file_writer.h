// Writing one checkpoint file of tensors, and reading one whole into
// tensors (libtorch's side of checkpoint_file.h): the writer streams each
// tensor as it is fetched, a chunk at a time from the device, so it never
// holds more than one tensor (or one chunk of it) in memory. (private to
// checkpoint/ and train/)
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "checkpoint/checkpoint_file.h"

namespace dtrain {

// The format's dtype of a tensor dtype, or nullopt if it cannot be stored.
std::optional<CheckpointDtype> checkpointDtypeOf(torch::ScalarType type);
// The tensor dtype of a stored one.
torch::ScalarType torchDtypeOf(CheckpointDtype dtype);
// The name in the format of a tensor dtype, or nullptr if it cannot be stored.
const char* checkpointDtypeName(torch::ScalarType type);

// One tensor to write. `fetch` is called once, when its turn comes, and
// returns the tensor's values (any device, any strides, shape as declared);
// CUDA tensors are copied to the host a chunk at a time.
struct TensorToWrite {
  std::string name;
  torch::ScalarType dtype = torch::kFloat;
  std::vector<int64_t> shape;
  std::function<torch::Tensor()> fetch;
};


// Writes `path` atomically (a temporary in the same directory, fsync,
// rename, fsync of the directory): a crash leaves either the old file or
// the new one. ConfigError for a tensor the format cannot hold, a fetched
// tensor of another shape or dtype, or meta that is not JSON, before the
// file is in place; IoError naming `path` and the OS reason, with the
// temporary removed.
WrittenFile writeCheckpointFile(const std::string& path, const nlohmann::json& meta,
                                const std::vector<TensorToWrite>& tensors);

// Every tensor of `file` on the CPU, checking the CRC in the same pass.
std::vector<std::pair<std::string, torch::Tensor>> readAllTensors(const CheckpointFile& file);

}  // namespace dtrain
