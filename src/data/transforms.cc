#include "data/transforms.h"

namespace dtrain::data {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

AugmentDraw augmentDraw(const TransformSpec& spec, int64_t dataset_index) {
  uint64_t h = splitmix64(spec.seed ^ 0x6a09e667f3bcc909ULL);
  h = splitmix64(h ^ static_cast<uint64_t>(spec.epoch));
  h = splitmix64(h ^ static_cast<uint64_t>(dataset_index));
  AugmentDraw draw;
  const uint64_t span = static_cast<uint64_t>(2 * spec.crop_padding + 1);
  if (spec.random_crop) {
    draw.dy = static_cast<int64_t>((h & 0xffff) % span);
    draw.dx = static_cast<int64_t>(((h >> 16) & 0xffff) % span);
  } else {
    draw.dy = draw.dx = spec.crop_padding;
  }
  draw.flip = spec.random_flip && ((h >> 40) & 1) != 0;
  return draw;
}

torch::Tensor transformBatch(const torch::Tensor& images, const std::vector<int64_t>& dataset_indices,
                             const TransformSpec& spec) {
  torch::Tensor out = images.to(torch::kFloat).div_(255.0);
  if (spec.random_crop || spec.random_flip) {
    const int64_t pad = spec.random_crop ? spec.crop_padding : 0;
    const int64_t h = out.size(2), w = out.size(3);
    torch::Tensor padded = pad > 0 ? torch::constant_pad_nd(out, {pad, pad, pad, pad}, 0.0) : out;
    torch::Tensor result = torch::empty_like(out);
    TransformSpec local = spec;
    local.crop_padding = pad;
    for (int64_t i = 0; i < out.size(0); ++i) {
      const AugmentDraw d = augmentDraw(local, dataset_indices[static_cast<size_t>(i)]);
      torch::Tensor crop = padded[i].narrow(1, d.dy, h).narrow(2, d.dx, w);
      result[i].copy_(d.flip ? crop.flip({2}) : crop);
    }
    out = result;
  }
  if (!spec.mean.empty()) {
    const int64_t c = out.size(1);
    torch::Tensor mean = torch::tensor(spec.mean).view({1, c, 1, 1});
    torch::Tensor std = torch::tensor(spec.std).view({1, c, 1, 1});
    out.sub_(mean).div_(std);
  }
  return out;
}

}  // namespace dtrain::data
