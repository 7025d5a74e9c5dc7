// DataParallel: synchronous data-parallel training of a torch::nn::Module
// over a dtrain Communicator (what DistributedDataParallel is to PyTorch, for
// the C++ API).
//
//   auto ctx = dtrain::init();
//   auto model = std::make_shared<Net>(); model->to(ctx->device());
//   dtrain::DataParallel dp(model, ctx->communicator());
//   auto opt = dtrain::makeSGD(dp.slabs(), {.lr = 0.1, .momentum = 0.9});
//   for (...) { opt->zeroGrad(); loss(model->forward(x), y).backward(); opt->step(); }
//
// Contract:
// - Construction moves every trainable parameter into one flat buffer per
//   dtype (the "slab"; per dtype and weight-decay group when
//   no_weight_decay names parameters); each parameter and its .grad become
//   views into the slab and its gradient slab, so an optimizer updates whole
//   slabs. The slab holds parameters in reverse registration order (the
//   order backward produces gradients), each padded to 16 bytes.
// - Construction broadcasts parameters and buffers from rank 0, so every
//   rank starts from rank 0's model.
// - Buckets are contiguous slices of the gradient slab: the first ~1 MiB
//   (first_bucket_mb), then up to bucket_mb each. During backward a bucket
//   is all-reduced (averaged) as soon as all its gradients are accumulated,
//   while backward goes on; on CUDA the all-reduce runs on a communication
//   stream. Buckets start in the same order on every rank. When backward()
//   returns, every .grad holds the average over ranks (like DDP).
// - Parameters that got no gradient in a backward keep what their gradient
//   slab holds (zero after zeroGrad()) and are averaged like the others, so
//   unused parameters need no flag and every rank runs the same collectives.
// - Gradients accumulate across backward passes until zeroGrad(); inside a
//   noSync() scope backward only accumulates locally, and the next backward
//   outside it averages the sum (gradient accumulation as with DDP.no_sync()).
// - Buffers (BatchNorm running statistics) are not averaged. As with DDP's
//   broadcast_buffers, rank 0's buffers are the model's: syncBuffers()
//   broadcasts them, and dtrain train calls it before evaluation and
//   checkpoints. Training-mode BatchNorm normalises with each rank's own
//   batch statistics (not SyncBatchNorm).
// - Do not replace parameter tensors, call .to() on the module, or set
//   .grad to undefined after construction (zeroGrad() zeros in place): the
//   views would be lost. Move the module to its device first.
// - A failed or timed-out all-reduce surfaces from backward() (CommError).
// - An observer (setObserver) is told when each backward starts and ends
//   and when each bucket is ready and reduced; timing, timelines and
//   metrics are built on it (train/bucket_timer.h), DataParallel keeps no
//   clock of its own.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include <torch/torch.h>

#include "dtrain/optim.h"

namespace dtrain {

class Communicator;
class Work;

struct DataParallelOptions {
  double bucket_mb = 25.0;
  double first_bucket_mb = 1.0;
  // Broadcast parameters and buffers from rank 0 at construction.
  bool broadcast_at_start = true;
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  // Parameters the optimizer must not decay (norms, biases, embeddings):
  // they get slabs of their own, whose FlatSlab::weight_decay is false.
  std::vector<torch::Tensor> no_weight_decay;
  // Each slab's numel is rounded up to a multiple of this (>= 1) with zero
  // padding that no bucket covers (its gradient stays 0): a sharded
  // optimizer splits slabs into equal slices. slabNumel() gives the length
  // before padding.
  int64_t slab_multiple = 1;
};

// One bucket: a contiguous slice [offset, offset + numel) of slab `slab`'s
// gradient, holding the gradients of `params` (indices into parameters()).
struct Bucket {
  int slab = 0;
  int64_t offset = 0;
  int64_t numel = 0;
  std::vector<int> params;
};

// What DataParallel tells an observer about each synchronised backward. The
// calls come on the thread running backward, in this order: started, then
// per bucket (in launch order) ready, launching and launched, then ended;
// on the CPU, completed per bucket once its all-reduce has finished (on
// CUDA the host does not wait: an observer records an event on the
// communication stream at launched). `stream` is the cudaStream_t the
// event belongs on (the compute stream for started/ready/ended, the
// communication stream for launching/launched), nullptr on the CPU.
// Observers must not throw.
class GradSyncObserver {
 public:
  virtual ~GradSyncObserver() = default;
  virtual void backwardStarted(void* stream) {}
  // Every gradient of the bucket was accumulated (not called for a bucket
  // launched at the end of backward because some of its parameters got no
  // gradient).
  virtual void bucketReady(int bucket, void* stream) {}
  virtual void bucketLaunching(int bucket, void* stream) {}
  virtual void bucketLaunched(int bucket, void* stream) {}
  virtual void backwardEnded(void* stream) {}
  virtual void bucketCompleted(int bucket) {}
};

class DataParallel {
 public:
  DataParallel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Communicator> communicator,
               DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  const std::shared_ptr<torch::nn::Module>& module() const { return module_; }
  // Trainable parameters in registration order (the module's parameters()).
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  // The flat parameter/gradient slabs, one per dtype, for optimizers.
  const std::vector<FlatSlab>& slabs() const { return slabs_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Slab i's parameters' length, without the slab_multiple padding.
  int64_t slabNumel(size_t i) const { return slab_numel_.at(i); }

  // Zeros every gradient slab in place.
  void zeroGrad();
  // Broadcasts the module's buffers (BatchNorm statistics) from rank 0.
  void syncBuffers();
  // Broadcasts parameters from rank 0 (done at construction).
  void syncParameters();

  // While alive, backward passes only accumulate local gradients.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DataParallel& dp) : dp_(dp), previous_(dp.no_sync_) { dp_.no_sync_ = true; }
    ~NoSyncGuard() { dp_.no_sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DataParallel& dp_;
    bool previous_;
  };
  NoSyncGuard noSync() { return NoSyncGuard(*this); }

  // The observer of every later backward (nullptr: none); not owned.
  void setObserver(GradSyncObserver* observer);
  GradSyncObserver* observer() const { return observer_; }
  int64_t syncedBackwards() const { return synced_backwards_; }
  // Bytes of bucket b's gradients.
  int64_t bucketBytes(int b) const;

 private:
  struct Impl;
  torch::Device collectParameters();
  void buildSlabs(torch::Device device);
  void installHooks();
  void onGradReady(int param);
  void launchBucket(int bucket);
  void finishBackward();
  void broadcastTensors(const std::vector<torch::Tensor>& tensors);

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<Communicator> comm_;
  DataParallelOptions options_;
  std::vector<torch::Tensor> params_;
  std::vector<FlatSlab> slabs_;
  std::vector<int64_t> slab_numel_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_param_;
  std::shared_ptr<Impl> impl_;  // hooks, per-backward state, streams, events
  bool no_sync_ = false;
  int64_t synced_backwards_ = 0;
  GradSyncObserver* observer_ = nullptr;
  std::mutex mutex_;
};

}  // namespace dtrain
