// DistributedSampler: which dataset indices this rank reads in an epoch,
// with exactly PyTorch's torch.utils.data.DistributedSampler semantics, so a
// job moved between the two sees the same samples.
//
//   shuffle:   indices = randperm(N) from a CPU generator seeded with
//              seed + epoch (the same torch op and generator PyTorch uses);
//              otherwise 0..N-1.
//   drop_last: total = floor(N / replicas) * replicas, the tail is cut;
//   else:      total = ceil(N / replicas) * replicas, padded by repeating
//              indices from the start (repeatedly when N < the padding).
//   rank r takes indices[r : total : replicas], num_samples() of them.
//
// Resuming mid-epoch: indices(start) skips the first `start` samples this
// rank already consumed, so indices(k) == the tail of indices(0) from k.
//
// Not thread-safe; one per rank (and per loader).
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain::data {

class DistributedSampler {
 public:
  // ConfigError when dataset_size < 0, num_replicas < 1 or rank is not in
  // [0, num_replicas).
  DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);

  // The epoch picks the shuffle; call it before each epoch, on every rank.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  // Samples per rank per epoch, and across all ranks.
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }

  // This rank's indices for the current epoch, from position start_offset
  // on (0 <= start_offset <= num_samples(), else ConfigError).
  std::vector<int64_t> indices(int64_t start_offset = 0) const;

 private:
  int64_t dataset_size_;
  int64_t num_replicas_;
  int64_t rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
};

}  // namespace dtrain::data
