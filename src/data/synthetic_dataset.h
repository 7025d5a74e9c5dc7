// Deterministic synthetic images for benchmarks and smoke tests.
//
// Sample i depends only on (seed, i, shape, classes), never on size or on
// torch's RNG, so it is identical across libtorch versions, across runs and
// whichever rank generates it. Each class has a fixed random prototype
// image; a sample is its class prototype blended half-and-half with noise,
// so a model can learn it (loss falls), unlike pure noise.
#pragma once

#include <cstdint>

#include "data/dataset.h"

namespace dtrain::data {

struct SyntheticSpec {
  int64_t channels = 3;
  int64_t height = 32;
  int64_t width = 32;
  int64_t classes = 10;
  uint64_t seed = 0;
  int64_t size = 1024;  // number of samples
};

// images uint8 [size, channels, height, width], labels int64 [size] in
// [0, classes). ConfigError when a dimension or classes is < 1 or size < 0.
ImageDataset makeSyntheticDataset(const SyntheticSpec& spec);

}  // namespace dtrain::data
