// Batch transforms of the loader: uint8 -> float in [0,1], random crop with
// zero padding and horizontal flip (as torchvision's RandomCrop(padding) and
// RandomHorizontalFlip), then per-channel normalisation.
//
// Every random draw is a pure function of (seed, epoch, dataset index of the
// sample) — a counter-based hash, no generator state — so a resumed epoch or
// another worker count reproduces it exactly.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace dtrain::data {

struct TransformSpec {
  std::vector<float> mean, std;  // empty: no normalisation
  bool random_crop = false;
  int64_t crop_padding = 4;
  bool random_flip = false;
  uint64_t seed = 0;
  int64_t epoch = 0;
};

// The draw for one sample: crop offsets in [0, 2 * padding] and a flip bit.
struct AugmentDraw {
  int64_t dy = 0, dx = 0;
  bool flip = false;
};
AugmentDraw augmentDraw(const TransformSpec& spec, int64_t dataset_index);

// images: uint8 [B, C, H, W]; dataset_indices: B indices (for the draws).
// Returns float32 [B, C, H, W], contiguous.
torch::Tensor transformBatch(const torch::Tensor& images, const std::vector<int64_t>& dataset_indices,
                             const TransformSpec& spec);

}  // namespace dtrain::data
