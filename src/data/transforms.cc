#include "data/transforms.h"

#include <algorithm>

#include "data/counter_hash.h"

namespace dtrain::data {
namespace {

// Writes sample `src` (uint8 [C, H, W]) cropped and maybe mirrored into dst
// (float [C, H, W]) without materialising the padded image: only the part of
// the crop window that overlaps the image is copied, the rest is zero.
void cropFlipInto(const torch::Tensor& src, const AugmentDraw& draw, int64_t padding, torch::Tensor dst) {
  const int64_t h = src.size(1), w = src.size(2);
  const int64_t oy = draw.dy - padding, ox = draw.dx - padding;  // crop origin in image coordinates
  const int64_t y0 = std::max<int64_t>(0, -oy), y1 = std::min(h, h - oy);
  const int64_t x0 = std::max<int64_t>(0, -ox), x1 = std::min(w, w - ox);
  if (oy != 0 || ox != 0) dst.zero_();
  if (y1 <= y0 || x1 <= x0) return;  // the window lies wholly in the padding
  torch::Tensor window = src.narrow(1, y0 + oy, y1 - y0).narrow(2, x0 + ox, x1 - x0);
  // Mirroring the crop maps its columns [x0, x1) to [w - x1, w - x0).
  const int64_t dst_x = draw.flip ? w - x1 : x0;
  dst.narrow(1, y0, y1 - y0).narrow(2, dst_x, x1 - x0).copy_(draw.flip ? window.flip({2}) : window);
}

}  // namespace

AugmentDraw augmentDraw(const TransformSpec& spec, int64_t dataset_index) {
  uint64_t h = splitmix64(spec.seed ^ 0x6a09e667f3bcc909ULL);
  h = splitmix64(h ^ static_cast<uint64_t>(spec.epoch));
  h = splitmix64(h ^ static_cast<uint64_t>(dataset_index));
  AugmentDraw draw;
  if (spec.random_crop) {
    const uint64_t span = static_cast<uint64_t>(2 * spec.crop_padding + 1);
    draw.dy = static_cast<int64_t>((h & 0xffffffffULL) % span);
    draw.dx = static_cast<int64_t>((h >> 32) % span);
  } else {
    draw.dy = draw.dx = spec.crop_padding;
  }
  // From a further mix, so turning the crop on or off leaves the flips alone.
  draw.flip = spec.random_flip && (splitmix64(h) & 1) != 0;
  return draw;
}

void transformBatchInto(const torch::Tensor& images, const std::vector<int64_t>& dataset_indices,
                        const TransformSpec& spec, torch::Tensor& out) {
  if (spec.random_crop || spec.random_flip) {
    for (int64_t i = 0; i < images.size(0); ++i) {
      const AugmentDraw draw = augmentDraw(spec, dataset_indices[static_cast<size_t>(i)]);
      cropFlipInto(images[i], draw, spec.crop_padding, out[i]);
    }
  } else {
    out.copy_(images);  // converts to float and to out's memory format in one pass
  }
  // ToTensor then Normalize, exactly: (x / 255 - mean) / std.
  out.div_(255.0);
  if (!spec.mean.empty()) {
    const int64_t c = static_cast<int64_t>(spec.mean.size());
    auto per_channel = [c](const std::vector<float>& v) {
      return torch::from_blob(const_cast<float*>(v.data()), {1, c, 1, 1}, torch::kFloat);
    };
    out.sub_(per_channel(spec.mean)).div_(per_channel(spec.std));
  }
}

torch::Tensor transformBatch(const torch::Tensor& images, const std::vector<int64_t>& dataset_indices,
                             const TransformSpec& spec) {
  torch::Tensor out = torch::empty(images.sizes(), torch::kFloat);
  transformBatchInto(images, dataset_indices, spec, out);
  return out;
}

}  // namespace dtrain::data
