// An in-memory image classification dataset, as every loader in data/
// returns it. Header only.
#pragma once

#include <cstdint>

#include <torch/types.h>

namespace dtrain::data {

// images: uint8, [N, C, H, W], contiguous, on the CPU.
// labels: int64, [N], values in [0, num_classes).
struct ImageDataset {
  torch::Tensor images;
  torch::Tensor labels;

  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

}  // namespace dtrain::data
