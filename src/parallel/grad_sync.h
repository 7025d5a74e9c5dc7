// GradSync: how DataParallel's gradient buckets are synchronised across the
// ranks while backward runs (private to parallel/). One piece is chosen
// once, when a DataParallel is composed (parallelize(), or the stage its
// DataParallelOptions name):
//   AllReduceBuckets (all_reduce_buckets.h): replicated and ZeRO-1;
//   ReduceScatterBuckets (reduce_scatter_buckets.h): ZeRO-2 and ZeRO-3.
// DataParallel's backward hooks (data_parallel_backward.cc, "the driver")
// call the piece; the piece never sees autograd.
//
// Contract between the driver and a piece:
// - Before the layout exists the driver asks bucketMultiple() (every
//   bucket's numel is padded to a multiple of it), keepsFullGradients()
//   (whether the slabs get a gradient slab) and launchOrder(); then it
//   builds the FlatLayout and calls attach() once. The piece keeps
//   references to the layout and the context; both outlive it.
// - In a synchronised backward, on backward's thread and under the
//   driver's lock: started() once the compute stream is known (the first
//   gradient, or the loss's when the model has units); gradientReady(param, bucket) after autograd accumulated
//   the parameter's gradient (or after a kernel took takeUnwritten(param,
//   bucket) and wrote it); for each bucket exactly once, prepare(bucket)
//   (on the compute stream, once its gradients are all in or backward
//   ended, before the bucket's ready event is recorded), then, in
//   launchOrder() on every rank, launch(bucket) with the communication
//   stream already waiting on that event. launch issues the
//   bucket's collective on the communication stream, tells the observer
//   launching/launched, and returns its Work.
// - finish(works) ends a backward on the CPU (the driver joins the streams
//   on CUDA and does not call it): every collective of the backward is
//   complete, its result is where the optimizer reads it, and the observer
//   was told bucketCompleted per bucket.
// - reducesEveryBackward(): whether a backward inside noSync() is reduced
//   anyway (a piece that keeps no full gradient has nothing to accumulate
//   into locally).
// - On CUDA nothing a piece does in a backward waits on the host, so a
//   step can be captured into a CUDA graph.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "dtrain/data_parallel.h"
#include "dtrain/optim.h"

#if DTRAIN_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>

#include <optional>
#endif

namespace dtrain {

class Communicator;
class Work;

// DataParallel's flat layout, as its pieces read it.
struct FlatLayout {
  std::vector<torch::Tensor> params;          // trainable, in registration order
  std::vector<FlatSlab> slabs;                // ZeRO-3: neither param nor grad
  std::vector<int64_t> slab_numel;            // without any padding
  std::vector<torch::ScalarType> slab_dtype;
  std::vector<int64_t> padded_numel;          // with slab_multiple's or the buckets' padding
  std::vector<int64_t> param_offset;          // each parameter's element offset in its slab
  std::vector<Bucket> buckets;
  std::vector<int> bucket_of_param;
  // Padded buckets (bucketMultiple() > 1): each bucket where it lies and
  // where it lay unpadded; empty otherwise.
  std::vector<ShardPiece> pieces;
  // ZeRO-3: this rank's float32 master slice of each bucket (the parameter
  // sharding's); empty: the slabs hold the parameters.
  std::vector<torch::Tensor> master_slices;
};

// The streams of a backward (CUDA) and whom to tell about it.
struct SyncContext {
  std::shared_ptr<Communicator> comm;
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  GradSyncObserver* observer = nullptr;
  bool cuda = false;
  int device_index = 0;
  // The stream this backward's gradient kernels run on (see the driver).
  void* compute_stream = nullptr;
  // CUDA: the communication stream and compute_stream as torch streams
  // (defined below for the code built with CUDA; the struct's layout does
  // not depend on DTRAIN_TORCH_CUDA, which only parallel/'s library sees).
  struct CudaStreams;
  std::shared_ptr<CudaStreams> streams;
  void* commStream() const;
  torch::Device device() const;
};

#if DTRAIN_TORCH_CUDA
struct SyncContext::CudaStreams {
  std::optional<c10::cuda::CUDAStream> comm;
  std::optional<c10::cuda::CUDAStream> compute;
};
#endif

class GradSync {
 public:
  virtual ~GradSync() = default;

  // Asked before the layout exists.
  virtual int64_t bucketMultiple(int64_t world) const = 0;
  virtual bool keepsFullGradients() const = 0;
  virtual bool reducesEveryBackward() const = 0;
  // Bucket indices in the order every rank launches them (default: the
  // plan's, slab by slab).
  virtual std::vector<int> launchOrder(const std::vector<Bucket>& buckets) const;
  virtual void attach(const FlatLayout& layout, SyncContext& context) = 0;

  // In a backward (see the contract).
  virtual void started() {}
  virtual void gradientReady(int param, int bucket) {}
  virtual void prepare(int bucket) {}
  virtual std::shared_ptr<Work> launch(int bucket) = 0;
  virtual void finish(const std::vector<std::shared_ptr<Work>>& works) = 0;

  // Zeros the gradients the piece keeps (gradient slabs or shards);
  // set_to_none: a piece may instead have the next backward write over
  // them (DataParallel::zeroGrad's contract).
  virtual void zeroGrad(bool set_to_none) = 0;
  // In a backward, for a kernel that writes a parameter's whole gradient
  // itself (models/gradient_slot.h): where to write it, if nothing of this
  // backward was (the piece then counts it written), else undefined. A
  // piece that keeps full gradients returns undefined (DataParallel's
  // slab slots answer for it).
  virtual torch::Tensor takeUnwritten(int param, int bucket) { return {}; }
  // Bytes of gradient this rank holds.
  virtual int64_t gradientBytes() const = 0;
  // The dtype bucket b travels in.
  virtual torch::ScalarType bucketDtype(int bucket) const = 0;
  // Sharded gradients: this rank's slice of each bucket (param and grad
  // views); empty otherwise.
  virtual const std::vector<FlatSlab>& shards() const;
};

}  // namespace dtrain
