// AllReduceBuckets: the gradient synchronisation of replicated data
// parallelism and ZeRO-1 (a GradSync, grad_sync.h; private to parallel/).
//
// Contract (beyond GradSync's):
// - Every parameter's .grad is a view into its slab's gradient slab
//   (keepsFullGradients), which autograd accumulates into; a bucket is a
//   contiguous slice of it.
// - launch(b) all-reduces (averages) bucket b in place, in the slab's
//   dtype, on the communication stream; buckets are not padded and launch
//   slab by slab in plan order. Over a group of one rank nothing runs (the
//   Work returned is complete).
// - noSync() skips the reduction: gradients accumulate in the slabs and the
//   next synchronised backward averages the sum (reducesEveryBackward is
//   false).
// - finish() (CPU) waits for the all-reduces in launch order, telling the
//   observer bucketCompleted for each.
#pragma once

#include "parallel/grad_sync.h"

namespace dtrain {

class AllReduceBuckets : public GradSync {
 public:
  int64_t bucketMultiple(int64_t) const override { return 1; }
  bool keepsFullGradients() const override { return true; }
  bool reducesEveryBackward() const override { return false; }
  void attach(const FlatLayout& layout, SyncContext& context) override;

  std::shared_ptr<Work> launch(int bucket) override;
  void finish(const std::vector<std::shared_ptr<Work>>& works) override;

  void zeroGrad(bool set_to_none) override;
  int64_t gradientBytes() const override;
  torch::ScalarType bucketDtype(int bucket) const override;

 private:
  const FlatLayout* layout_ = nullptr;
  SyncContext* context_ = nullptr;
};

}  // namespace dtrain
