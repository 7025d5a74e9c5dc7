// Batch transforms of the loader, in torchvision's order and arithmetic:
// RandomCrop(size, padding) with zero padding, RandomHorizontalFlip(0.5),
// ToTensor (uint8 -> float / 255), Normalize(mean, std).
//
// Every random draw is a pure function of (seed, epoch, dataset index of the
// sample) — a splitmix64 hash, no generator state — so a resumed epoch or
// another worker count reproduces it bit for bit. A sample that appears twice
// in one epoch (DistributedSampler's padding) gets the same draw both times.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace dtrain::data {

struct TransformSpec {
  std::vector<float> mean = {}, std = {};  // one per channel; empty: no normalisation
  bool random_crop = false;
  int64_t crop_padding = 4;
  bool random_flip = false;
  uint64_t seed = 0;
  int64_t epoch = 0;
};

// The draw for one sample: the crop's top-left corner in the padded image,
// in [0, 2 * crop_padding] (crop_padding, i.e. no shift, without
// random_crop), and whether to mirror it.
struct AugmentDraw {
  int64_t dy = 0, dx = 0;
  bool flip = false;
};
AugmentDraw augmentDraw(const TransformSpec& spec, int64_t dataset_index);

// images: uint8 [B, C, H, W] (any strides); dataset_indices: B indices, for
// the draws. Writes the transformed batch into out: float32 [B, C, H, W],
// allocated by the caller in whatever memory and memory format it wants
// delivered (pinned, channels_last), so no further copy is needed.
void transformBatchInto(const torch::Tensor& images, const std::vector<int64_t>& dataset_indices,
                        const TransformSpec& spec, torch::Tensor& out);

// The same into a new contiguous float32 tensor.
torch::Tensor transformBatch(const torch::Tensor& images, const std::vector<int64_t>& dataset_indices,
                             const TransformSpec& spec);

}  // namespace dtrain::data
