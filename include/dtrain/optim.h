// Optimizers over flat parameter slabs (what torch.optim is to PyTorch, for
// the slabs DataParallel keeps).
//
//   auto opt = dtrain::makeAdamW(dp.slabs(), {.lr = 1e-3});
//   opt->zeroGrad(); loss.backward(); dtrain::clipGradNorm(opt->slabs(), 1.0); opt->step();
//
// Contract:
// - A slab is one contiguous 1-D float32 or float64 tensor of parameters with
//   a gradient of the same dtype, device and numel (CPU or CUDA). Parameters
//   that are views into a slab see every update. Anything else is rejected
//   at construction with ConfigError naming the slab.
// - step() updates each slab with a few whole-slab in-place kernels (never
//   one per parameter), exactly by torch.optim.SGD / torch.optim.AdamW's
//   formulas. It runs under NoGradGuard and never reads the device. Weight
//   decay applies to the slabs whose weight_decay flag is set (a parameter
//   group with weight_decay 0 in torch.optim terms for the others).
// - Optimizer state lives on the slab's device. stateDict() returns the live
//   state tensors (no copies: clone them to keep a snapshot) plus a CPU int64
//   step count; loadStateDict() copies into the live state after checking
//   every key, shape and dtype first (ConfigError, nothing changed on error).
//   The key set depends only on the options and slab count, so a fresh
//   optimizer lists every key a checkpoint of the same setup holds.
// - Capturable mode (setCapturable(true), for CUDA graphs): the learning
//   rate and AdamW's step count live in device scalars that step() reads on
//   the device, so a step captured once and replayed uses the lr setLr()
//   wrote before each replay. step() then no longer counts steps on the
//   host; whoever replays calls countStep() once per replayed step. The
//   number of kernels per step stays a small constant per slab.
// - Not thread-safe; one optimizer per set of slabs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace dtrain {

class Communicator;

// One contiguous 1-D slab of parameters and its gradient: same dtype, device,
// numel. DataParallel keeps every parameter as a view into such slabs.
struct FlatSlab {
  torch::Tensor param;
  torch::Tensor grad;
  // Whether the optimizer's weight decay applies to this slab (GPT recipes
  // exempt norms, biases and embeddings: DataParallel gives them slabs of
  // their own).
  bool weight_decay = true;
};

// One tensor of an optimizer's state as this rank holds it: it covers
// elements [begin, begin + tensor.numel()) of slab `slab`, in the layout
// the optimizers see (DataParallel's slabs, or the pieces of a ZeRO-2/3
// ShardLayout, padding included: what DataParallel::slabRuns maps onto
// parameters). What a sharded checkpoint saves and restores per parameter.
struct LocalOptimizerState {
  std::string name;  // "adamw.exp_avg", "adamw.exp_avg_sq", "sgd.momentum"
  int slab = 0;
  int64_t begin = 0;
  torch::Tensor tensor;  // the live 1-D state: writing into it restores it
};

struct SGDOptions {
  double lr = 0.1;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every slab from its current grad.
  virtual void step() = 0;
  double lr() const { return lr_; }
  // ConfigError unless lr >= 0 (a schedule sets this every step).
  virtual void setLr(double lr);
  // grad.zero_() on every slab; the grad stays defined (views stay valid).
  void zeroGrad();
  // See the contract. Turning it on with momentum SGD needs at least one
  // step taken (the first step initialises the momentum buffer on the host's
  // say-so): ConfigError otherwise.
  void setCapturable(bool on);
  bool capturable() const { return capturable_; }
  // Capturable mode: one replayed step happened (advances stepCount()).
  virtual void countStep() { ++steps_; }
  int64_t stepCount() const { return steps_; }
  const std::vector<FlatSlab>& slabs() const { return slabs_; }

  // Keys "sgd.step", "sgd.momentum.<slab>" (momentum != 0 only);
  // "adamw.step", "adamw.exp_avg.<slab>", "adamw.exp_avg_sq.<slab>".
  // "*.step" is an int64 scalar tensor on the CPU: the steps taken so far.
  virtual std::map<std::string, torch::Tensor> stateDict() const = 0;
  // ConfigError naming a missing key or a shape/dtype mismatch.
  virtual void loadStateDict(const std::map<std::string, torch::Tensor>& state) = 0;
  virtual std::string name() const = 0;  // "sgd" / "adamw"
  // This rank's state, gathering nothing (no collective, unlike a sharded
  // optimizer's stateDict()): every state tensor with the slab range it
  // covers, live (no copies). The step count is stepCount(). To restore,
  // copy into the tensors, then setStepCount().
  virtual std::vector<LocalOptimizerState> localState() const = 0;
  // Sets the steps taken (stateDict()'s "<name>.step"; AdamW's bias
  // corrections follow it). ConfigError unless steps >= 0.
  virtual void setStepCount(int64_t steps);
  // Bytes of optimizer state this rank holds (its slice when sharded),
  // counted from the state tensors.
  virtual int64_t stateBytes() const;

  // Keeps, with every step, the absolute maximum of each of `ranges`
  // (element ranges [begin, end) of slab `slab`'s param, sorted, not
  // overlapping) as the step leaves them: an int32 tensor [ranges] on the
  // slab's device, each element a maximum's float32 bit pattern (what
  // FP8's weight casts read instead of a pass of their own:
  // models/fp8_linear.h's noteAbsoluteMaximum). Undefined where this
  // optimizer cannot: only AdamW's fused kernel on CUDA can (not SGD, not
  // ZeRO's sharded optimizers, whose ranks hold slices). Replaces what an
  // earlier call asked of that slab; empty ranges stop it.
  virtual torch::Tensor trackAbsoluteMaxima(int slab, const std::vector<std::pair<int64_t, int64_t>>& ranges);
  // Whether the last step() wrote every tracked maximum (a step by torch
  // operations, such as the first, non-capturable one, writes none).
  virtual bool absoluteMaximaCurrent() const { return false; }

 protected:
  // Validates the slabs (ConfigError naming `who`, the slab and the problem).
  Optimizer(std::vector<FlatSlab> slabs, double lr, const std::string& who);

  // Device-side lr (capturable mode): a float32 [1] tensor per slab device.
  const torch::Tensor& lrTensor() const { return lr_tensor_; }
  virtual void onCapturableChanged() {}

  std::vector<FlatSlab> slabs_;
  double lr_;
  int64_t steps_ = 0;
  bool capturable_ = false;
  torch::Tensor lr_tensor_;
};

// ConfigError unless lr >= 0, momentum >= 0, weight_decay >= 0, and nesterov
// has momentum > 0 and dampening 0 (torch.optim.SGD's checks).
std::unique_ptr<Optimizer> makeSGD(std::vector<FlatSlab> slabs, const SGDOptions& options);
// ConfigError unless lr >= 0, 0 <= beta1, beta2 < 1, eps > 0, weight_decay >= 0.
std::unique_ptr<Optimizer> makeAdamW(std::vector<FlatSlab> slabs, const AdamWOptions& options);

// libtorch's own optimizers on DataParallel's parameters, where code expects
// a torch::optim::Optimizer: parameter groups each with their own options
// (lr, weight decay, betas), libtorch's LR schedulers, state_dict().
//
//   dtrain::TorchOptimizer<torch::optim::AdamW> opt(
//       {torch::optim::OptimizerParamGroup(decay, std::make_unique<torch::optim::AdamWOptions>(3e-4)),
//        torch::optim::OptimizerParamGroup(no_decay, ...weight_decay(0))},
//       torch::optim::AdamWOptions(3e-4));
//   for (...) { opt.zero_grad(); loss.backward(); opt.step(); }
//
// DataParallel's gradients are views into its flat buffers, averaged in
// place: libtorch's zero_grad() cannot keep them (1.13 refuses to detach a
// view; 2.x sets them to undefined), so this one zeros them in place, like
// DataParallel::zeroGrad(). Call it on this type, not through a
// torch::optim::Optimizer& (zero_grad is not virtual there). The flat
// optimizers above (makeSGD/makeAdamW: one lr, weight decay per slab) are
// the faster choice; this is the one with parameter groups.
template <class TorchOpt>
class TorchOptimizer : public TorchOpt {
 public:
  using TorchOpt::TorchOpt;
  // set_to_none is accepted for libtorch's signature and ignored: the
  // gradients stay DataParallel's views, zeroed.
  void zero_grad(bool set_to_none = false) {
    (void)set_to_none;
    torch::NoGradGuard no_grad;
    for (auto& group : this->param_groups()) {
      for (auto& p : group.params()) {
        if (p.grad().defined()) p.mutable_grad().zero_();
      }
    }
  }
};

// ZeRO stage 1 (DeepSpeed's optimizer-state partitioning; FSDP's
// SHARD_GRAD_OP without the gradient part): each of the communicator's N
// ranks keeps the optimizer state of, and updates, a contiguous 1/N slice of
// every slab, then the slices are all-gathered so every rank holds every
// updated parameter. `make` builds the per-rank optimizer over the slices
// (makeSGD / makeAdamW with the run's options); the updates are the
// elementwise ones of the unsharded optimizer, so a run equals the
// replicated one bit for bit. Every slab's numel must be a multiple of N
// (DataParallelOptions::slab_multiple); `logical_numel[i]` is slab i's
// length before that padding. The returned optimizer's slabs() are the full
// slabs (zeroGrad and clipping see every gradient). stateDict() gathers the
// slices (a collective: every rank calls it) and returns each state tensor
// at its logical length, the layout an unsharded optimizer has, so a
// checkpoint loads at any world size, sharded or not; loadStateDict() takes
// that layout and keeps this rank's slice. On CUDA the all-gather is
// stream-ordered (capturable); on the CPU step() waits for it.
std::unique_ptr<Optimizer> makeShardedOptimizer(
    std::vector<FlatSlab> slabs, std::vector<int64_t> logical_numel, std::shared_ptr<Communicator> communicator,
    const std::function<std::unique_ptr<Optimizer>(std::vector<FlatSlab>)>& make,
    std::chrono::milliseconds timeout);

// A contiguous piece [offset, offset + numel) of parameter slab `slab` that
// the N ranks split evenly: rank r owns [offset + r*numel/N, offset +
// (r+1)*numel/N). In the unsharded layout (what stateDict() returns) its
// first logical_numel elements lie at logical_offset of the slab; the rest
// is padding.
struct ShardPiece {
  int slab = 0;
  int64_t offset = 0;
  int64_t numel = 0;
  int64_t logical_offset = 0;
  int64_t logical_numel = 0;
};

// Where the state of a ZeRO-2 or ZeRO-3 run lives (DataParallel::shardLayout()).
struct ShardLayout {
  // ZeRO-2: the full parameter slabs, every rank the same. ZeRO-3: empty
  // (no rank holds a full slab; see slices).
  std::vector<torch::Tensor> params;
  std::vector<bool> weight_decay;      // each slab's FlatSlab::weight_decay
  std::vector<int64_t> logical_numel;  // each slab's length in the unsharded layout
  std::vector<int64_t> numel;          // each slab's padded length (the pieces tile it)
  std::vector<ShardPiece> pieces;      // tiling every slab, in slab and offset order
  // grads[k]: this rank's gradient of its part of piece k (numel/N
  // elements, not a view of a full gradient: ZeRO-2 keeps none).
  std::vector<torch::Tensor> grads;
  // ZeRO-3: slices[k] is this rank's part of piece k's parameters (its
  // float32 master copy), and `published` runs after every update instead
  // of an all-gather (DataParallel casts the slices for its next gathers).
  std::vector<torch::Tensor> slices;
  std::function<void()> published;
};

// ZeRO stages 2 and 3 (DeepSpeed's gradient and parameter partitioning;
// FSDP's SHARD_GRAD_OP and FULL_SHARD): the same as the ZeRO-1 factory
// above, over the pieces of `layout`
// (DataParallel's buckets, each padded to a multiple of N) instead of whole
// slabs. `make` gets one slice per piece: this rank's part of the piece's
// parameters (a view into the slab) and its gradient (layout.grads[k]).
// After the update every piece is all-gathered in place (ZeRO-3:
// layout.published runs instead, the slices being the parameters). The returned
// optimizer's slabs() are those slices: zeroGrad() clears this rank's
// gradient shard, and clipping them needs the communicator (the
// clipGradNormOnDevice overload below). stateDict() / loadStateDict() use
// the unsharded layout (logical_numel long per slab), as ZeRO-1's do, so a
// checkpoint moves between world sizes and stages.
std::unique_ptr<Optimizer> makeShardedOptimizer(
    ShardLayout layout, std::shared_ptr<Communicator> communicator,
    const std::function<std::unique_ptr<Optimizer>(std::vector<FlatSlab>)>& make,
    std::chrono::milliseconds timeout);

// torch.nn.utils.clip_grad_norm_ over every element of every slab's grad:
// when the total L2 norm is finite and > max_norm, scales every grad in place
// by max_norm / (total + 1e-6). Returns the total norm before clipping (one
// device read). Non-finite norms leave the grads as they are (GradScaler
// skips such a step). ConfigError unless max_norm > 0.
double clipGradNorm(const std::vector<FlatSlab>& slabs, double max_norm);
// The same without reading the device: the norm and the decision to clip
// stay on the device (the coefficient is min(1, max_norm / (total + 1e-6)),
// 1 when total is not finite), so it can be captured into a CUDA graph.
// Returns the total norm before clipping, a float64 scalar on the device.
torch::Tensor clipGradNormOnDevice(const std::vector<FlatSlab>& slabs, double max_norm);
// The parts of the two above, for gradients held elsewhere too (as
// torch.nn.utils.get_total_norm and clip_grads_with_norm_): the sum of the
// squared L2 norms of every slab's grad, a float64 scalar on the first
// slab's device (0 on the CPU for no slabs); and the in-place scaling by
// min(1, max_norm / (total_norm + 1e-6)), 1 when total_norm is not finite.
// Neither reads the device.
torch::Tensor gradSquaredNorm(const std::vector<FlatSlab>& slabs);
void clipGradsWithNorm(const std::vector<FlatSlab>& slabs, const torch::Tensor& total_norm, double max_norm);
// Both over gradients sharded across the communicator's ranks (ZeRO-2:
// `slabs` are this rank's slices): the squared norms of every rank's slices
// are summed by an all-reduce of one float64 (a collective: every rank
// calls it at the same point), so every rank gets the global norm and
// scales its slices by the same coefficient. On CUDA the all-reduce is
// ordered on the current stream (capturable); on the CPU it is waited for.
torch::Tensor clipGradNormOnDevice(const std::vector<FlatSlab>& slabs, double max_norm, Communicator& communicator,
                                   std::chrono::milliseconds timeout);
double clipGradNorm(const std::vector<FlatSlab>& slabs, double max_norm, Communicator& communicator,
                    std::chrono::milliseconds timeout);

}  // namespace dtrain
