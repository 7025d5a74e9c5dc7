// ReduceScatterBuckets: the gradient synchronisation of ZeRO-2 and ZeRO-3
// (a GradSync, grad_sync.h; private to parallel/). FSDP's reduce-scatter
// of gradients, over DataParallel's buckets.
//
// Contract (beyond GradSync's):
// - No rank keeps a full gradient (keepsFullGradients is false). Every
//   bucket is padded to a multiple of 64 x N elements (bucketMultiple) and
//   rank r owns the r-th 1/N of each: shards() lists those slices, their
//   grads views into one gradient shard per slab (1/N of the slab; their
//   params views into the slab, or ZeRO-3's master slices).
// - gradientReady writes the parameter's gradient, as autograd produced
//   it, into its bucket's staging buffer (in reduce_dtype): the first one
//   of a backward copied over what the buffer held, later ones added; and
//   drops it (.grad stays undefined). takeUnwritten hands a kernel the
//   parameter's staging view to write its first gradient into itself.
//   prepare(b), before the bucket goes, zeros what nothing was written
//   into (parameters without a gradient, padding). launch(b)
//   reduce-scatters (averages) the staging buffer in place and writes
//   this rank's part into its shard (over it after zeroGrad(true), else
//   added): on CUDA at once on the communication stream; on the CPU once
//   the collective is done (when its staging buffer is needed again, or at
//   finish()).
// - Buckets launch in the order backward is expected to finish them
//   across slabs (by their earliest registered parameter, latest first),
//   so that buckets waiting their turn do not pile up in staging buffers.
// - Staging buffers come from a pool of buffers the size of the largest
//   bucket: two at first, reused once their bucket's reduce-scatter is
//   done (on CUDA stream-ordered through events, no host wait), one more
//   only while every buffer holds a bucket whose gradients still arrive.
// - Every backward is reduced, noSync() included (reducesEveryBackward);
//   the shards add up across backwards until zeroGrad() (zeroGrad(true):
//   the next backward's part is written over them instead of added).
// - reduce_dtype: float32, or bfloat16 to stage and reduce-scatter in half
//   the bytes; the shards stay in the slab's dtype.
#pragma once

#include <deque>

#include "parallel/grad_sync.h"

namespace dtrain {

class ReduceScatterBuckets : public GradSync {
 public:
  // ConfigError unless reduce_dtype is float32 or bfloat16.
  explicit ReduceScatterBuckets(torch::ScalarType reduce_dtype);
  ~ReduceScatterBuckets() override;

  int64_t bucketMultiple(int64_t world) const override { return int64_t{64} * world; }
  bool keepsFullGradients() const override { return false; }
  bool reducesEveryBackward() const override { return true; }
  std::vector<int> launchOrder(const std::vector<Bucket>& buckets) const override;
  void attach(const FlatLayout& layout, SyncContext& context) override;

  void started() override;
  void gradientReady(int param, int bucket) override;
  void prepare(int bucket) override;
  torch::Tensor takeUnwritten(int param, int bucket) override;
  std::shared_ptr<Work> launch(int bucket) override;
  void finish(const std::vector<std::shared_ptr<Work>>& works) override;

  void zeroGrad(bool set_to_none) override;
  int64_t gradientBytes() const override;
  torch::ScalarType bucketDtype(int bucket) const override;
  const std::vector<FlatSlab>& shards() const override { return shards_; }

 private:
  void buildShards();
  void stage(int bucket);
  torch::Tensor stagingView(int param, int bucket) const;
  void addIntoShard(int bucket, const torch::Tensor& own);
  void addStagingBuffer();
  void completeOldest();
  void release(int bucket);

  torch::ScalarType reduce_dtype_;
  const FlatLayout* layout_ = nullptr;
  SyncContext* context_ = nullptr;
  std::vector<torch::Tensor> grad_shards_;  // per slab
  std::vector<FlatSlab> shards_;            // per bucket
  int64_t staging_bytes_ = 0;               // of the largest bucket
  // Staging buffers (bytes) and which bucket holds which. Free slots are
  // reused oldest release first (on CUDA: the reduce-scatter that used it
  // had the most time to finish).
  std::vector<torch::Tensor> pool_;
  std::deque<int> free_slots_;
  std::vector<int> slot_of_bucket_;        // -1: none
  std::vector<torch::Tensor> staging_;     // per bucket: its view of its slot
  std::vector<char> written_;              // per parameter: its staging view holds this backward's gradient
  // Per bucket: the runs of its staging buffer no parameter covers
  // (element offset in the bucket, length).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> gaps_;
  std::vector<char> shard_stale_;          // per bucket: its shard is written over, not added to
  struct InFlight {
    int bucket;
    std::shared_ptr<Work> work;
  };
  // CPU: reduce-scattered buckets whose part is not yet in the shard.
  std::deque<InFlight> in_flight_;
  // CUDA: per slot, an event recorded on the communication stream once
  // its bucket was added into the shard (reduce_scatter_buckets.cc; the
  // class's layout does not depend on DTRAIN_TORCH_CUDA).
  struct SlotEvents;
  std::unique_ptr<SlotEvents> events_;
};

}  // namespace dtrain
