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
//   outside it averages the sum (gradient accumulation as with DDP.no_sync());
//   with shard_gradients every backward is reduced (see below).
// - Buffers (BatchNorm running statistics) are not averaged. As with DDP's
//   broadcast_buffers, rank 0's buffers are the model's: syncBuffers()
//   broadcasts them, and dtrain train calls it before evaluation and
//   checkpoints. Training-mode BatchNorm normalises with each rank's own
//   batch statistics (not SyncBatchNorm).
// - Do not replace parameter tensors, call .to() on the module, or set
//   .grad to undefined after construction (zeroGrad() zeros in place): the
//   views would be lost. Move the module to its device first.
// - ZeRO-2 (options.shard_gradients; FSDP's SHARD_GRAD_OP): no rank keeps
//   a full gradient. Every bucket is padded to a multiple of 64 x N
//   elements (the parameters move with it) and rank r owns the r-th 1/N of
//   each bucket: shards() lists those slices, their gradients views into
//   one shard buffer per slab (1/N of the slab). During backward a
//   parameter's gradient, as autograd produced it, is added into its
//   bucket's staging buffer and dropped (.grad stays undefined); a bucket
//   whose gradients are all there is reduce-scattered (averaged) as above,
//   overlapping the rest of backward, and this rank's part is added into
//   its shard. Buckets launch in the order backward is expected to finish
//   them across slabs (by their earliest registered parameter, latest
//   first) rather than slab by slab, so that buckets waiting for their turn
//   do not pile up in staging buffers. Staging buffers come from a pool of buffers the
//   size of the largest bucket: two at first, reused once their bucket's
//   reduce-scatter is done (on CUDA: stream-ordered through events, no host
//   wait, so a step can be captured), and one more only while every buffer
//   holds a bucket whose gradients are still arriving. Every backward is
//   reduced, noSync() included (there is no full gradient to accumulate
//   into); the shards add up across backwards until zeroGrad(), so
//   accumulation sums the per-backward averages. slabs() keep their
//   parameters but no gradient (FlatSlab::grad undefined): optimizers take
//   shardLayout() (makeShardedOptimizer) and clip shards() with the
//   communicator (clipGradNormOnDevice).
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
  // ZeRO-2: reduce-scatter the buckets and keep 1/N of the gradients (see
  // the contract).
  bool shard_gradients = false;
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
  // Slab i's parameters' length, without the slab_multiple padding (and
  // without the ZeRO-2 bucket padding: the unsharded layout).
  int64_t slabNumel(size_t i) const { return slab_numel_.at(i); }
  const std::shared_ptr<Communicator>& communicator() const { return comm_; }

  // ZeRO-2 (shard_gradients): this rank's slice of each bucket, in bucket
  // order: param a view into the slab, grad a view into its gradient shard.
  // Empty otherwise.
  bool shardsGradients() const { return options_.shard_gradients; }
  const std::vector<FlatSlab>& shards() const { return shards_; }
  // What a sharded optimizer needs (pieces are the buckets); ZeRO-2 only.
  ShardLayout shardLayout() const;
  // Bytes of gradient this rank holds: the gradient slabs; with
  // shard_gradients its shards plus the staging buffers allocated so far.
  int64_t gradientBytes() const;

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
  void startBackward();
  void launchBucket(int bucket);
  void finishBackward();
  // ZeRO-2 (data_parallel.cc tells the steps).
  void planLaunchOrder();
  void buildShards();
  void stageGradient(int param, int bucket);
  void acquireStaging(int bucket);
  void addStagingBuffer();
  void launchReduceScatter(int bucket);
  void completeOldest();
  void releaseStaging(int bucket);
  void broadcastTensors(const std::vector<torch::Tensor>& tensors);

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<Communicator> comm_;
  DataParallelOptions options_;
  std::vector<torch::Tensor> params_;
  std::vector<FlatSlab> slabs_;
  std::vector<int64_t> slab_numel_;
  std::vector<int64_t> param_offset_;  // each parameter's element offset in its slab
  std::vector<Bucket> buckets_;
  // ZeRO-2: the buckets as pieces, this rank's slices, the shard buffers.
  std::vector<ShardPiece> pieces_;
  std::vector<FlatSlab> shards_;
  std::vector<torch::Tensor> grad_shards_;
  int64_t staging_bytes_ = 0;  // of the largest bucket
  std::vector<int> bucket_of_param_;
  std::vector<int> launch_order_;  // bucket indices, in the order every rank launches them
  std::shared_ptr<Impl> impl_;  // hooks, per-backward state, streams, events
  bool no_sync_ = false;
  int64_t synced_backwards_ = 0;
  GradSyncObserver* observer_ = nullptr;
  std::mutex mutex_;
};

}  // namespace dtrain
