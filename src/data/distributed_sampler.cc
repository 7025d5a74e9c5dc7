#include "data/distributed_sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include <string>

#include "common/error.h"

namespace dtrain::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (dataset_size < 0) {
    throw ConfigError("DistributedSampler dataset_size is " + std::to_string(dataset_size) +
                      "; expected >= 0");
  }
  if (num_replicas < 1) {
    throw ConfigError("DistributedSampler num_replicas is " + std::to_string(num_replicas) +
                      "; expected >= 1");
  }
  if (rank < 0 || rank >= num_replicas) {
    throw ConfigError("DistributedSampler rank is " + std::to_string(rank) + "; expected 0.." +
                      std::to_string(num_replicas - 1) + " for " + std::to_string(num_replicas) +
                      " replicas");
  }
  // PyTorch writes the drop_last case as ceil((N - replicas) / replicas),
  // which equals floor(N / replicas) for N % replicas != 0 (and N/replicas
  // otherwise).
  num_samples_ = drop_last ? dataset_size / num_replicas
                           : (dataset_size + num_replicas - 1) / num_replicas;
}

std::vector<int64_t> DistributedSampler::indices(int64_t start_offset) const {
  if (start_offset < 0 || start_offset > num_samples_) {
    throw ConfigError("DistributedSampler start offset is " + std::to_string(start_offset) +
                      "; expected 0.." + std::to_string(num_samples_) + " (samples per rank)");
  }
  std::vector<int64_t> all(static_cast<size_t>(dataset_size_));
  if (shuffle_ && dataset_size_ > 0) {
    // Same as PyTorch: g = torch.Generator(); g.manual_seed(seed + epoch);
    // torch.randperm(N, generator=g).
    at::Generator gen = at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch_));
    torch::Tensor perm = torch::randperm(dataset_size_, gen, torch::kLong);
    const int64_t* p = perm.data_ptr<int64_t>();
    all.assign(p, p + dataset_size_);
  } else {
    for (int64_t i = 0; i < dataset_size_; ++i) all[i] = i;
  }
  // Position j of the padded/truncated list is all[j % N]: that is both the
  // drop_last cut and PyTorch's padding by repetition from the start.
  const int64_t total = total_size();
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_ - start_offset));
  for (int64_t k = start_offset; k < num_samples_; ++k) {
    const int64_t j = rank_ + k * num_replicas_;
    if (j < total) mine.push_back(all[j % dataset_size_]);
  }
  return mine;
}

}  // namespace dtrain::data
