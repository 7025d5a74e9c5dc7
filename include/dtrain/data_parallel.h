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
// - Frozen parameters (requires_grad false: a LoRA run's base) are none of
//   DataParallel's: they stay where and as they are (every rank holds them
//   whole, ZeRO-3 included), in no slab, bucket, optimizer state or
//   collective, and get no gradient; each rank must hold the same values
//   (the same seed, or the same files loaded).
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
//   parameter's gradient, as autograd produced it, is written (the
//   backward's first) or added into its bucket's staging buffer and
//   dropped (.grad stays undefined); a bucket
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
// - ZeRO-3 (options.shard_parameters; FSDP's FULL_SHARD): the parameters
//   are sharded too. The model is cut into units (a models::Model's
//   shardingUnits(), given as options.model, or options.units: unit 0 its
//   embeddings, final norm and head, then one per transformer block);
//   buckets are the units' runs of parameters in
//   each slab (no size cap), padded to 64 x N as in ZeRO-2, and rank r
//   keeps the r-th 1/N of each as its float32 master copy (shards()'
//   params, views into one master shard per slab) besides its gradient
//   shard. The module's parameters become views into preallocated slots
//   of options.param_dtype (float32, or bfloat16 to compute in it as
//   FSDP's MixedPrecisionPolicy(param_dtype=bf16)): unit 0 has a slot of
//   its own, the blocks share two. The model calls this DataParallel's
//   unitHooks() (construction registers them with options.model): a
//   unit's slot is all-gathered just before its forward and again before
//   its backward, the next unit's gather issued ahead on a stream and
//   communicator of its own (options.gather_communicator) so it overlaps
//   compute; gradients go to staging and are reduce-scattered as in
//   ZeRO-2. The optimizer (makeShardedOptimizer over shardLayout())
//   updates the master shards; the slots are refilled at the next forward.
//   Parameters hold their values only while their unit is gathered: read
//   them with fullParameters() (a collective) and set them with
//   loadFullParameters(). slabs() have neither parameters nor gradients.
// - options.reduce_dtype (ZeRO-2 and ZeRO-3): the dtype gradients are
//   staged and reduce-scattered in (float32, or bfloat16 for half the
//   bytes, as FSDP's reduce_dtype); the gradient shards stay float32.
// - A failed or timed-out all-reduce surfaces from backward() (CommError).
// - options.model: the module as a models::Model, passed explicitly
//   (DataParallel never guesses a module's type). While the DataParallel
//   lives, the model's unit hooks are its own: ZeRO-3's gathers, or, for a
//   model with units, the hook that starts backward's bookkeeping at the
//   loss (so activation checkpointing's nested backwards are never taken
//   for the whole one).
// - The stages are pieces (parallel/grad_sync.h and its two
//   implementations, parallel/sharded_parameters.h), chosen once at
//   construction from the options; dtrain's jobs compose them from a
//   ParallelPlan (parallel/parallelize.h).
// - An observer (setObserver) is told when each backward starts and ends
//   and when each bucket is ready and reduced; timing, timelines and
//   metrics are built on it (train/bucket_timer.h), DataParallel keeps no
//   clock of its own.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "dtrain/optim.h"

namespace dtrain {

class Communicator;
class Work;
struct SlabPlan;
struct DataParallelPieces;
namespace models {
class Model;
class UnitHooks;
}

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
  // ZeRO-3: shard the parameters too (implies shard_gradients). `units`:
  // the parameters of each unit, the root first (empty: the module's
  // models::Model::shardingUnits()); every trainable parameter in exactly
  // one unit.
  bool shard_parameters = false;
  std::vector<std::vector<torch::Tensor>> units;
  // ZeRO-3: the dtype the gathered parameters compute in (float32 or
  // bfloat16); the master shards stay float32.
  torch::ScalarType param_dtype = torch::kFloat;
  // ZeRO-2 and ZeRO-3: the dtype gradients are reduce-scattered in
  // (float32 or bfloat16).
  torch::ScalarType reduce_dtype = torch::kFloat;
  // ZeRO-3: a communicator over the same ranks for the parameter gathers
  // (null: the main one; on CUDA give one, so gathers and reduce-scatters
  // run concurrently without their order depending on each other).
  std::shared_ptr<Communicator> gather_communicator;
  // The module as a models::Model (the same object), or null for any other
  // module: its units (ZeRO-3, unless `units` names them) and its unit
  // hooks (see the contract). Not owned; the module outlives the
  // DataParallel.
  models::Model* model = nullptr;
};

// A run of one parameter's elements that lies in a range of a slab:
// elements [offset, offset + numel) of parameters()[param], counted in its
// memory order (row-major, or channels-last for such a weight: the slab
// holds the parameter as it lies in memory), sit at `position` from the
// range's start.
struct ParameterRun {
  int param = 0;
  int64_t offset = 0;
  int64_t numel = 0;
  int64_t position = 0;
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
  // dtrain's own (parallel/parallelize.h): the stage given as pieces; the
  // stage's fields of `options` (shard_gradients, shard_parameters, units,
  // param_dtype, reduce_dtype, gather_communicator) are not read.
  DataParallel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Communicator> communicator,
               DataParallelOptions options, DataParallelPieces&& pieces);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  const std::shared_ptr<torch::nn::Module>& module() const;
  // Trainable parameters in registration order (the module's parameters()).
  const std::vector<torch::Tensor>& parameters() const;
  // The flat parameter/gradient slabs, one per dtype, for optimizers.
  const std::vector<FlatSlab>& slabs() const;
  const std::vector<Bucket>& buckets() const;
  // Slab i's parameters' length, without the slab_multiple padding (and
  // without the ZeRO-2 bucket padding: the unsharded layout).
  int64_t slabNumel(size_t i) const;
  const std::shared_ptr<Communicator>& communicator() const;

  // ZeRO-2 and ZeRO-3: the gradients are sharded (reduce-scattered).
  bool shardsGradients() const;
  // ZeRO-3: the parameters are sharded too.
  bool shardsParameters() const;
  // ZeRO-3: what the model calls around its units (nullptr otherwise).
  models::UnitHooks* unitHooks() const;
  // Every parameter's current value, in parameters() order: the
  // parameters themselves, or (ZeRO-3, a collective every rank calls)
  // float32 tensors gathered from the master shards.
  std::vector<torch::Tensor> fullParameters();
  // Sets every parameter (values in parameters() order, each of its
  // parameter's shape); ZeRO-3 keeps this rank's slices in its master shard.
  void loadFullParameters(const std::vector<torch::Tensor>& values);
  // Bytes of parameters this rank holds: the slabs; ZeRO-3 its master
  // shards and the gather slots.
  int64_t parameterBytes() const;
  // The parameters' elements in elements [begin, begin + numel) of slab
  // `slab` (the layout the optimizers see: slabs() and, sharded, the
  // pieces of shardLayout(), padding included), in position order; padding
  // is in no run. What a checkpoint maps an optimizer's flat state onto.
  std::vector<ParameterRun> slabRuns(int slab, int64_t begin, int64_t numel) const;
  // Slab `slab`'s length in that layout (with its padding).
  int64_t paddedSlabNumel(size_t slab) const;
  // ZeRO-2 and ZeRO-3: this rank's slice of each bucket, in bucket order:
  // param a view into the slab (ZeRO-3: into its master shard), grad a
  // view into its gradient shard. Empty otherwise.
  const std::vector<FlatSlab>& shards() const;
  // What a sharded optimizer needs (pieces are the buckets); ZeRO-2 and
  // ZeRO-3 only (ConfigError otherwise).
  ShardLayout shardLayout() const;
  // Bytes of gradient this rank holds: the gradient slabs; with
  // shard_gradients its shards plus the staging buffers allocated so far.
  int64_t gradientBytes() const;

  // Zeros every gradient slab (or shard) in place. set_to_none (as
  // PyTorch's zero_grad(set_to_none=True)) writes nothing now: until the
  // next backward that synchronises ends, the gradients (slabs, or with
  // sharded gradients the shards) hold unspecified values, and that
  // backward (with any noSync() ones before it) writes each parameter's
  // first gradient (each bucket's first reduced part) over them instead
  // of adding it to zeros; parameters that got none are zeroed before
  // their bucket is reduced. A pass over every gradient less each step.
  void zeroGrad(bool set_to_none = false);
  // Broadcasts the module's buffers (BatchNorm statistics) from rank 0.
  void syncBuffers();
  // Broadcasts parameters from rank 0 (done at construction).
  void syncParameters();

  // While alive, backward passes only accumulate local gradients.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DataParallel& dp) : dp_(dp), previous_(dp.setNoSync(true)) {}
    ~NoSyncGuard() { dp_.setNoSync(previous_); }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DataParallel& dp_;
    bool previous_;
  };
  NoSyncGuard noSync() { return NoSyncGuard(*this); }

  // The observer of every later backward (nullptr: none); not owned.
  void setObserver(GradSyncObserver* observer);
  GradSyncObserver* observer() const;
  int64_t syncedBackwards() const;
  // Bytes of bucket b's gradients.
  int64_t bucketBytes(int b) const;

 private:
  // Sets whether backward only accumulates; returns what it was.
  bool setNoSync(bool no_sync);

  // The layout, the pieces, the backward's bookkeeping
  // (parallel/data_parallel_impl.h).
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace dtrain
