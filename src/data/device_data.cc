#include "data/device_data.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "data/distributed_sampler.h"
#include "data/transforms.h"

namespace dtrain::data {
namespace {

// A host vector as an owning tensor on `device` (a copy even on the CPU, so
// it outlives the vector).
template <typename T>
torch::Tensor upload(const std::vector<T>& values, torch::ScalarType host_type, torch::ScalarType type,
                     torch::Device device) {
  return torch::from_blob(const_cast<T*>(values.data()), {static_cast<int64_t>(values.size())}, host_type)
      .to(device, type, /*non_blocking=*/false, /*copy=*/true);
}

torch::Tensor perChannel(const std::vector<float>& values, torch::Device device) {
  return upload(values, torch::kFloat, torch::kFloat, device).view({1, static_cast<int64_t>(values.size()), 1, 1});
}

}  // namespace

DeviceEpochData::DeviceEpochData(const ImageDataset& dataset, LoaderOptions options) : options_(std::move(options)) {
  options_.num_workers = 0;
  options_.prefetch_batches = 1;
  options_.pin_memory = false;
  // The loader's own checks and shard arithmetic, so both agree on what is
  // an error and on how many samples and batches an epoch has.
  const DataLoader reference(dataset, options_);
  dataset_size_ = dataset.size();
  samples_per_epoch_ = reference.samplesPerEpoch();
  batches_per_epoch_ = reference.batchesPerEpoch();

  const torch::Device device = options_.device;
  images_ = dataset.images.to(device).contiguous();
  labels_ = dataset.labels.to(device);
  // A tensor, not a scalar: CUDA turns division by a CPU scalar into a
  // multiplication by its reciprocal, which can differ from the loader's
  // CPU division in the last bit.
  scale_ = torch::full({}, 255.0f, torch::TensorOptions().dtype(torch::kFloat).device(device));
  if (!options_.mean.empty()) {
    mean_ = perChannel(options_.mean, device);
    std_ = perChannel(options_.std, device);
  }
}


void DeviceEpochData::startEpoch(int64_t epoch) {
  // Released first, so the old and the new epoch need not fit together
  // (unless the caller still holds views of the old one).
  epoch_images_ = torch::Tensor();
  epoch_labels_ = torch::Tensor();
  started_ = false;

  std::vector<int64_t> order = epochOrder(dataset_size_, options_, epoch);
  // drop_last's tail is never delivered; it is not built.
  order.resize(static_cast<size_t>(std::min<int64_t>(samples_per_epoch_, batches_per_epoch_ * options_.batch_size)));
  const int64_t n = static_cast<int64_t>(order.size());
  const torch::Device device = options_.device;
  const torch::Tensor indices = upload(order, torch::kLong, torch::kLong, device);

  epoch_labels_ = labels_.index_select(0, indices);
  epoch_images_ = torch::empty({n, images_.size(1), images_.size(2), images_.size(3)},
                               torch::TensorOptions().dtype(torch::kFloat).device(device),
                               options_.channels_last ? torch::MemoryFormat::ChannelsLast
                                                      : torch::MemoryFormat::Contiguous);
  if (options_.random_crop || options_.random_flip) {
    cropFlipInto(indices, epoch, order, epoch_images_);
  } else {
    for (int64_t begin = 0; begin < n; begin += kChunkSamples) {
      const int64_t m = std::min(kChunkSamples, n - begin);
      epoch_images_.narrow(0, begin, m).copy_(images_.index_select(0, indices.narrow(0, begin, m)));
    }
  }
  // transforms.cc's arithmetic, element for element: (x / 255 - mean) / std.
  epoch_images_.div_(scale_);
  if (mean_.defined()) epoch_images_.sub_(mean_).div_(std_);
  started_ = true;
}

void DeviceEpochData::cropFlipInto(const torch::Tensor& indices, int64_t epoch,
                                   const std::vector<int64_t>& host_indices, torch::Tensor& out) const {
  const TransformSpec spec{options_.mean,        options_.std,  options_.random_crop, options_.crop_padding,
                           options_.random_flip, options_.seed, epoch};
  // Without random_crop the window is the image itself: no padding needed.
  const int64_t pad = options_.random_crop ? options_.crop_padding : 0;
  const int64_t n = static_cast<int64_t>(host_indices.size());
  std::vector<int64_t> dy(host_indices.size()), dx(host_indices.size());
  std::vector<uint8_t> flip(host_indices.size());
  for (size_t i = 0; i < host_indices.size(); ++i) {
    const AugmentDraw draw = augmentDraw(spec, host_indices[i]);
    // The window's origin in the image padded by `pad` on every side.
    dy[i] = draw.dy - options_.crop_padding + pad;
    dx[i] = draw.dx - options_.crop_padding + pad;
    flip[i] = draw.flip ? 1 : 0;
  }
  const torch::Device device = options_.device;
  const torch::Tensor rows0 = upload(dy, torch::kLong, torch::kLong, device);
  const torch::Tensor cols0 = upload(dx, torch::kLong, torch::kLong, device);
  const torch::Tensor mirror = upload(flip, torch::kByte, torch::kBool, device);

  const int64_t c = images_.size(1), h = images_.size(2), w = images_.size(3);
  const auto index_options = torch::TensorOptions().dtype(torch::kLong).device(device);
  const torch::Tensor ys = torch::arange(h, index_options).view({1, h});
  const torch::Tensor xs = torch::arange(w, index_options).view({1, w});
  const torch::Tensor xs_mirrored = (w - 1) - xs;
  for (int64_t begin = 0; begin < n; begin += kChunkSamples) {
    const int64_t m = std::min(kChunkSamples, n - begin);
    torch::Tensor chunk = images_.index_select(0, indices.narrow(0, begin, m));
    if (pad > 0) chunk = torch::constant_pad_nd(chunk, {pad, pad, pad, pad}, 0);
    // Row y of the crop is padded row dy + y; column x is dx + x, or
    // dx + (W - 1 - x) when mirrored. The index tensors are expanded views.
    const torch::Tensor rows = (rows0.narrow(0, begin, m).view({m, 1}) + ys).view({m, 1, h, 1});
    chunk = chunk.gather(2, rows.expand({m, c, h, w + 2 * pad}));
    const torch::Tensor flipped = mirror.narrow(0, begin, m).view({m, 1});
    const torch::Tensor cols =
        (cols0.narrow(0, begin, m).view({m, 1}) + torch::where(flipped, xs_mirrored, xs)).view({m, 1, 1, w});
    chunk = chunk.gather(3, cols.expand({m, c, h, w}));
    out.narrow(0, begin, m).copy_(chunk);  // to float, and to out's memory format
  }
}

Batch DeviceEpochData::batch(int64_t k) const {
  if (!started_) throw ConfigError("device data: batch " + std::to_string(k) + " requested before startEpoch()");
  if (k < 0 || k >= batches_per_epoch_) {
    throw ConfigError("device data: batch " + std::to_string(k) + " is outside the epoch's " +
                      std::to_string(batches_per_epoch_) + " batches");
  }
  const int64_t begin = k * options_.batch_size;
  const int64_t size = std::min(options_.batch_size, epoch_images_.size(0) - begin);
  Batch out;
  out.images = epoch_images_.narrow(0, begin, size);
  out.labels = epoch_labels_.narrow(0, begin, size);
  out.index = k;
  out.samples_before = begin;
  return out;
}

}  // namespace dtrain::data
