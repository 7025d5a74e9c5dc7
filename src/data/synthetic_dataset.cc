#include "data/synthetic_dataset.h"

#include <string>

#include "common/error.h"
#include "data/counter_hash.h"

namespace dtrain::data {
namespace {

constexpr uint64_t kLabelStream = 1, kPrototypeStream = 2, kNoiseStream = 3;

}  // namespace

ImageDataset makeSyntheticDataset(const SyntheticSpec& spec) {
  if (spec.channels < 1 || spec.height < 1 || spec.width < 1 || spec.classes < 1 || spec.size < 0) {
    throw ConfigError("synthetic dataset spec channels=" + std::to_string(spec.channels) +
                      " height=" + std::to_string(spec.height) + " width=" + std::to_string(spec.width) +
                      " classes=" + std::to_string(spec.classes) + " size=" + std::to_string(spec.size) +
                      "; expected dimensions and classes >= 1 and size >= 0");
  }
  const int64_t pixels = spec.channels * spec.height * spec.width;
  std::vector<uint8_t> prototypes(static_cast<size_t>(spec.classes * pixels));
  for (int64_t k = 0; k < spec.classes; ++k) {
    for (int64_t p = 0; p < pixels; ++p) {
      prototypes[k * pixels + p] = hash3(spec.seed ^ kPrototypeStream, k, p) & 0xff;
    }
  }
  ImageDataset ds{torch::empty({spec.size, spec.channels, spec.height, spec.width}, torch::kUInt8),
                  torch::empty({spec.size}, torch::kLong)};
  uint8_t* images = ds.images.data_ptr<uint8_t>();
  int64_t* labels = ds.labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < spec.size; ++i) {
    const int64_t label = static_cast<int64_t>(hash3(spec.seed ^ kLabelStream, i, 0) % spec.classes);
    labels[i] = label;
    const uint8_t* proto = prototypes.data() + label * pixels;
    uint8_t* out = images + i * pixels;
    for (int64_t p = 0; p < pixels; ++p) {
      const unsigned noise = hash3(spec.seed ^ kNoiseStream, i, p) & 0xff;
      out[p] = static_cast<uint8_t>((proto[p] + noise) / 2);
    }
  }
  return ds;
}

}  // namespace dtrain::data
