#include "parallel/all_reduce_buckets.h"

#include "comm/communicator.h"
#include "comm/work.h"
#include "parallel/tensor_buffer.h"

namespace dtrain {

void AllReduceBuckets::attach(const FlatLayout& layout, SyncContext& context) {
  layout_ = &layout;
  context_ = &context;
}

std::shared_ptr<Work> AllReduceBuckets::launch(int b) {
  const Bucket& bucket = layout_->buckets[static_cast<size_t>(b)];
  torch::Tensor grad = layout_->slabs[static_cast<size_t>(bucket.slab)].grad.narrow(0, bucket.offset, bucket.numel);
  AllreduceOptions options;
  options.op = ReduceOp::kAvg;
  options.timeout = context_->timeout;
  void* stream = context_->commStream();
  GradSyncObserver* observer = context_->observer;
  if (observer != nullptr) observer->bucketLaunching(b, stream);
  std::shared_ptr<Work> work;
  if (context_->comm->size() == 1) {
    // The average over one rank is the gradient itself (tensor parallelism
    // over the whole world leaves a data-parallel group of one): nothing
    // to run, not even a copy.
    work = std::make_shared<Work>("allreduce", 0);
    work->markCompleted();
  } else {
    work = context_->comm->allreduce(bufferOf(grad, stream), bufferOf(grad, stream), options);
  }
  if (observer != nullptr) observer->bucketLaunched(b, stream);
  return work;
}

// The launch order is the plan's, so the i-th work is bucket i's.
void AllReduceBuckets::finish(const std::vector<std::shared_ptr<Work>>& works) {
  for (size_t i = 0; i < works.size(); ++i) {
    works[i]->wait(context_->timeout);
    if (context_->observer != nullptr) context_->observer->bucketCompleted(static_cast<int>(i));
  }
}

void AllReduceBuckets::zeroGrad(bool /*set_to_none: DataParallel's slots*/) {
  for (const FlatSlab& slab : layout_->slabs) slab.grad.zero_();
}

int64_t AllReduceBuckets::gradientBytes() const {
  int64_t bytes = 0;
  for (const FlatSlab& slab : layout_->slabs) bytes += slab.grad.numel() * static_cast<int64_t>(slab.grad.element_size());
  return bytes;
}

torch::ScalarType AllReduceBuckets::bucketDtype(int b) const {
  return layout_->slab_dtype[static_cast<size_t>(layout_->buckets[static_cast<size_t>(b)].slab)];
}

}  // namespace dtrain
