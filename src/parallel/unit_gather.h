// UnitGather: ZeRO-3's parameter gathering (private to parallel/; DataParallel
// owns one when its parameters are sharded).
//
// Each unit of the model (models::UnitHooks: unit 0 the root, then the
// blocks) has its parameters in a slot, a preallocated buffer of the
// compute dtype; the parameters are views into it. The root has a slot of
// its own and stays gathered from forward to the end of backward; the
// blocks share `block_slots` slots (unit u >= 1 uses slot 1 + (u - 1) %
// block_slots), so a block's parameters exist only while it runs and while
// the next one is prefetched.
//
// Contract:
// - beforeForward(u) makes unit u's parameters valid for the compute stream
//   (gathering them unless the slot still holds them since the last
//   invalidate()) and issues the gather of unit u + 1 ahead, so it overlaps
//   u's forward. afterForward(u, outputs) wraps the outputs in an autograd
//   node whose backward calls beforeBackward(u): unit u is gathered again
//   (unless still there) and unit u - 1 is issued ahead, overlapping u's
//   backward. Unit 0's afterForward wraps the loss: its backward is the
//   start of backward (the on_backward_start callback, on the thread and
//   in the graph task that runs the outer backward).
// - A slot is overwritten only after the compute stream is past every
//   reader of its previous unit: forward reads of unit u are done once
//   beforeForward(u + 1) runs, backward reads once beforeBackward(u - 1)
//   runs (a block's backward reads its parameters only for the gradients
//   of its inputs), and all of them at the next beforeForward(0).
// - On CUDA the gathers run on a stream of their own through `comm` (a
//   communicator of their own, so their order never mixes with the
//   reduce-scatters'); the compute stream waits on events, the host never
//   does, and a whole step can be captured into a CUDA graph: every event
//   waited on in a step is recorded in that step. On the CPU each gather
//   is waited for where it is issued.
// - invalidate(): the shards changed (an optimizer step, a loaded
//   checkpoint); every unit is gathered again at its next use.
// - Gathers are issued in the same order on every rank (the model's unit
//   order forward, its reverse backward), as collectives must be.
// - Kept (a pipeline stage's units, whose micro-batches' forwards and
//   backwards interleave): every unit has a slot of its own and stays
//   gathered from its first use until invalidate(), so a step gathers each
//   unit once, not once per micro-batch (torchtitan's default for FSDP
//   under pipelining: no reshard after forward). Unit 0 may then be empty
//   (a middle stage holds no root parameters).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "models/model.h"

namespace dtrain {

class Communicator;
class Work;

// What a unit's outputs' gradients arriving calls (the autograd node that
// afterForward puts on them finds its listener by id, and does nothing
// once the listener is gone).
class BackwardListener {
 public:
  virtual ~BackwardListener();
  virtual void beforeBackward(int unit) = 0;

 protected:
  // Registers this listener; outputs wrapped by wrapOutputs() call it.
  void listen(const std::shared_ptr<BackwardListener>& self);
  std::vector<torch::Tensor> wrapOutputs(int unit, std::vector<torch::Tensor> outputs) const;

 private:
  int64_t registry_id_ = 0;
};

// A DataParallel's hooks when its parameters are not sharded: the loss's
// gradient arriving (unit 0) starts the backward's bookkeeping, in the
// outer backward's graph task, so that a nested backward (activation
// checkpointing's recomputation) is never taken for the whole one.
class BackwardStart : public models::UnitHooks, public BackwardListener {
 public:
  static std::shared_ptr<BackwardStart> create(std::function<void()> on_backward_start);
  void beforeForward(int) override {}
  std::vector<torch::Tensor> afterForward(int unit, std::vector<torch::Tensor> outputs) override;
  void beforeBackward(int unit) override;

 private:
  explicit BackwardStart(std::function<void()> on_backward_start) : on_start_(std::move(on_backward_start)) {}
  std::function<void()> on_start_;
};

class UnitGather : public models::UnitHooks, public BackwardListener {
 public:
  // One all-gather, in place: `source` (this rank's master slice, of any
  // floating dtype) is cast into this rank's slice of `whole`, the
  // world-size times larger view of the unit's slot, and every rank's
  // slice is gathered around it. No compute-dtype copy of the shards is
  // kept between gathers.
  struct Part {
    torch::Tensor source;
    torch::Tensor whole;
  };
  struct Unit {
    int slot = 0;
    std::vector<Part> parts;
  };

  enum class Residency { kPerUse, kKept };
  // ConfigError unless units[0] uses slot 0, the others slots 1.., and
  // every part's whole is world-size times its source; kKept: every unit a
  // slot of its own.
  static std::shared_ptr<UnitGather> create(std::vector<Unit> units, std::shared_ptr<Communicator> comm,
                                            std::chrono::milliseconds timeout,
                                            std::function<void()> on_backward_start,
                                            Residency residency = Residency::kPerUse);
  ~UnitGather() override;

  void beforeForward(int unit) override;
  std::vector<torch::Tensor> afterForward(int unit, std::vector<torch::Tensor> outputs) override;
  void beforeBackward(int unit) override;
  void invalidate();

  int units() const { return static_cast<int>(units_.size()); }
  // All-gathers issued so far, one per unit gathered (for tests).
  int64_t gathersIssued() const { return gathers_issued_; }

 private:
  UnitGather(std::vector<Unit> units, std::shared_ptr<Communicator> comm, std::chrono::milliseconds timeout,
             std::function<void()> on_backward_start, Residency residency);
  // Makes unit u's parameters valid for the compute stream.
  void ensure(int unit);
  // Issues unit u's gather unless its slot holds it already.
  void prefetch(int unit);
  void issue(int unit);
  // The compute stream is past every reader of the slot's current unit.
  void releaseSlot(int slot);
  void checkUnit(int unit) const;

  struct Streams;
  std::vector<Unit> units_;
  std::shared_ptr<Communicator> comm_;
  std::chrono::milliseconds timeout_;
  std::function<void()> on_backward_start_;
  bool kept_ = false;
  std::vector<int> resident_;  // per slot: the unit it holds (valid values), or -1
  int64_t gathers_issued_ = 0;
  std::unique_ptr<Streams> streams_;
};

}  // namespace dtrain
