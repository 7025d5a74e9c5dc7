// makeShardedOptimizer (optim.h): ZeRO stages 1 and 2 over DataParallel's
// slabs, and the gradient norm of sharded gradients.
#include <cctype>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "dtrain/optim.h"
#include "parallel/tensor_buffer.h"

namespace dtrain {
namespace {

using TensorMap = std::map<std::string, torch::Tensor>;

// Where a per-slab state key's index starts ("adamw.exp_avg.3" -> 14), or
// npos for the others ("adamw.step").
size_t indexPosition(const std::string& key) {
  const size_t dot = key.rfind('.');
  if (dot == std::string::npos || dot + 1 == key.size()) return std::string::npos;
  for (size_t i = dot + 1; i < key.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(key[i]))) return std::string::npos;
  }
  return dot + 1;
}

// The slab (or piece) a per-slab state key names, or -1 for the others.
int indexOfKey(const std::string& key) {
  const size_t at = indexPosition(key);
  return at == std::string::npos ? -1 : std::stoi(key.substr(at));
}

// "adamw.exp_avg.3", 7 -> "adamw.exp_avg.7".
std::string withIndex(const std::string& key, int index) {
  return key.substr(0, indexPosition(key)) + std::to_string(index);
}

// The inner optimizer updates this rank's slice of every piece (a slab for
// ZeRO-1, a bucket for ZeRO-2); the pieces are then all-gathered in place.
class ShardedOptimizer : public Optimizer {
 public:
  ShardedOptimizer(std::vector<FlatSlab> visible, ShardLayout layout, std::shared_ptr<Communicator> comm,
                   std::unique_ptr<Optimizer> inner, std::chrono::milliseconds timeout)
      : Optimizer(std::move(visible), inner->lr(), "sharded " + inner->name()),
        layout_(std::move(layout)),
        comm_(std::move(comm)),
        inner_(std::move(inner)),
        timeout_(timeout) {}

  void step() override {
    inner_->step();
    if (!capturable_) ++steps_;
    if (layout_.published) {  // ZeRO-3: the slices are all there is
      layout_.published();
      return;
    }
    torch::NoGradGuard no_grad;
    const int64_t world = comm_->size(), rank = comm_->rank();
    for (const ShardPiece& piece : layout_.pieces) {
      // In place: this rank's slice is its slot of the piece.
      const torch::Tensor full = layout_.params[static_cast<size_t>(piece.slab)].narrow(0, piece.offset, piece.numel);
      const int64_t slice = piece.numel / world;
      void* stream = currentStreamOf(full);
      AllgatherOptions options;
      options.timeout = timeout_;
      auto work = comm_->allgather(bufferOf(full.narrow(0, rank * slice, slice), stream), bufferOf(full, stream),
                                   options);
      if (!full.is_cuda()) work->wait(timeout_);  // on CUDA the stream is ordered after it
    }
  }

  void setLr(double lr) override {
    Optimizer::setLr(lr);
    inner_->setLr(lr);
  }

  void countStep() override {
    Optimizer::countStep();
    inner_->countStep();
  }

  // Each piece's slices gathered (a collective), placed at the piece's
  // logical offset of its slab's state tensor.
  TensorMap stateDict() const override {
    TensorMap out;
    torch::NoGradGuard no_grad;
    for (const auto& [key, slice] : inner_->stateDict()) {
      const int k = indexOfKey(key);
      if (k < 0 || k >= static_cast<int>(layout_.pieces.size())) {
        out[key] = slice;
        continue;
      }
      const ShardPiece& piece = layout_.pieces[static_cast<size_t>(k)];
      const torch::Tensor gathered = torch::empty({piece.numel}, slice.options());
      void* stream = currentStreamOf(gathered);
      AllgatherOptions options;
      options.timeout = timeout_;
      auto work = comm_->allgather(bufferOf(slice.contiguous(), stream), bufferOf(gathered, stream), options);
      if (!gathered.is_cuda()) work->wait(timeout_);
      torch::Tensor& whole = out[withIndex(key, piece.slab)];
      if (!whole.defined()) whole = torch::zeros({layout_.logical_numel[static_cast<size_t>(piece.slab)]}, slice.options());
      whole.narrow(0, piece.logical_offset, piece.logical_numel).copy_(gathered.narrow(0, 0, piece.logical_numel));
    }
    return out;
  }

  void loadStateDict(const TensorMap& state) override {
    TensorMap inner;
    torch::NoGradGuard no_grad;
    for (const auto& [key, tensor] : state) {
      const int slab = indexOfKey(key);
      if (slab < 0 || slab >= static_cast<int>(layout_.numel.size())) {
        inner[key] = tensor;
        continue;
      }
      const int64_t logical = layout_.logical_numel[static_cast<size_t>(slab)];
      if (tensor.dim() != 1 || tensor.numel() != logical) {
        throw ConfigError(name() + ": state '" + key + "' has shape " + toString(tensor.sizes()) + "; expected [" +
                          std::to_string(logical) + "] (slab " + std::to_string(slab) + ")");
      }
      for (size_t k = 0; k < layout_.pieces.size(); ++k) {
        if (layout_.pieces[k].slab == slab) inner[withIndex(key, static_cast<int>(k))] = sliceOf(tensor, k);
      }
    }
    inner_->loadStateDict(inner);
    steps_ = inner_->stepCount();
  }

  std::string name() const override { return inner_->name(); }
  int64_t stateBytes() const override { return inner_->stateBytes(); }

  // The inner optimizer's "slab" k is this rank's slice of piece k.
  std::vector<LocalOptimizerState> localState() const override {
    std::vector<LocalOptimizerState> state = inner_->localState();
    for (LocalOptimizerState& s : state) {
      const ShardPiece& piece = layout_.pieces.at(static_cast<size_t>(s.slab));
      s.begin += piece.offset + comm_->rank() * (piece.numel / comm_->size());
      s.slab = piece.slab;
    }
    return state;
  }

  void setStepCount(int64_t steps) override {
    inner_->setStepCount(steps);
    Optimizer::setStepCount(steps);
  }

 protected:
  void onCapturableChanged() override { inner_->setCapturable(capturable_); }

 private:
  // This rank's slice of piece k of `whole`, a slab's state in the logical
  // layout (the piece's padding reads as zeros).
  torch::Tensor sliceOf(const torch::Tensor& whole, size_t k) const {
    const ShardPiece& piece = layout_.pieces[k];
    const int64_t slice = piece.numel / comm_->size();
    const torch::Tensor padded = torch::zeros({piece.numel}, whole.options());
    padded.narrow(0, 0, piece.logical_numel).copy_(whole.narrow(0, piece.logical_offset, piece.logical_numel));
    return padded.narrow(0, comm_->rank() * slice, slice);
  }

  ShardLayout layout_;
  std::shared_ptr<Communicator> comm_;
  std::unique_ptr<Optimizer> inner_;
  std::chrono::milliseconds timeout_;
};

// ConfigError unless every piece lies inside its slab, splits evenly over
// `world` ranks and has a gradient of the size of one slice.
void checkLayout(const ShardLayout& layout, int64_t world) {
  const auto fail = [](size_t k, const std::string& why) {
    throw ConfigError("sharded optimizer: piece " + std::to_string(k) + " " + why);
  };
  if (layout.logical_numel.size() != layout.numel.size() || layout.weight_decay.size() != layout.numel.size() ||
      (!layout.params.empty() && layout.params.size() != layout.numel.size())) {
    throw ConfigError("sharded optimizer: " + std::to_string(layout.logical_numel.size()) + " logical lengths, " +
                      std::to_string(layout.weight_decay.size()) + " weight-decay flags and " +
                      std::to_string(layout.params.size()) + " parameter slabs for " +
                      std::to_string(layout.numel.size()) + " slabs");
  }
  if (layout.grads.size() != layout.pieces.size()) {
    throw ConfigError("sharded optimizer: " + std::to_string(layout.grads.size()) + " gradients for " +
                      std::to_string(layout.pieces.size()) + " pieces");
  }
  const bool sliced = layout.params.empty();  // ZeRO-3
  if (sliced && (layout.slices.size() != layout.pieces.size() || !layout.published)) {
    throw ConfigError("sharded optimizer: no parameter slabs, and " + std::to_string(layout.slices.size()) +
                      " parameter slices for " + std::to_string(layout.pieces.size()) +
                      " pieces (ZeRO-3 needs one each and a published callback)");
  }
  for (size_t k = 0; k < layout.pieces.size(); ++k) {
    const ShardPiece& p = layout.pieces[k];
    if (p.slab < 0 || p.slab >= static_cast<int>(layout.numel.size())) fail(k, "names no slab");
    const int64_t numel = layout.numel[static_cast<size_t>(p.slab)];
    const int64_t logical = layout.logical_numel[static_cast<size_t>(p.slab)];
    if (p.offset < 0 || p.numel <= 0 || p.offset + p.numel > numel || p.logical_numel < 0 ||
        p.logical_numel > p.numel || p.logical_offset < 0 || p.logical_offset + p.logical_numel > logical) {
      fail(k, "lies outside its slab");
    }
    if (p.numel % world != 0) {
      fail(k, "has " + std::to_string(p.numel) + " elements; expected a multiple of the " + std::to_string(world) +
                  " ranks");
    }
    if (layout.grads[k].numel() != p.numel / world) {
      fail(k, "has a gradient of " + std::to_string(layout.grads[k].numel()) + " elements; expected " +
                  std::to_string(p.numel / world));
    }
    if (sliced && layout.slices[k].numel() != p.numel / world) {
      fail(k, "has a parameter slice of " + std::to_string(layout.slices[k].numel()) + " elements; expected " +
                  std::to_string(p.numel / world));
    }
  }
}

std::unique_ptr<Optimizer> makeSharded(std::vector<FlatSlab> visible, ShardLayout layout,
                                       std::shared_ptr<Communicator> communicator,
                                       const std::function<std::unique_ptr<Optimizer>(std::vector<FlatSlab>)>& make,
                                       std::chrono::milliseconds timeout) {
  const int64_t world = communicator->size(), rank = communicator->rank();
  checkLayout(layout, world);
  std::vector<FlatSlab> slices;
  for (size_t k = 0; k < layout.pieces.size(); ++k) {
    const ShardPiece& piece = layout.pieces[k];
    const size_t slab = static_cast<size_t>(piece.slab);
    const int64_t slice = piece.numel / world;
    const torch::Tensor param =
        layout.params.empty() ? layout.slices[k] : layout.params[slab].narrow(0, piece.offset + rank * slice, slice);
    slices.push_back({param, layout.grads[k], layout.weight_decay[slab]});
  }
  if (visible.empty()) visible = slices;
  std::unique_ptr<Optimizer> inner = make(std::move(slices));
  return std::make_unique<ShardedOptimizer>(std::move(visible), std::move(layout), std::move(communicator),
                                            std::move(inner), timeout);
}

}  // namespace

std::unique_ptr<Optimizer> makeShardedOptimizer(
    std::vector<FlatSlab> slabs, std::vector<int64_t> logical_numel, std::shared_ptr<Communicator> communicator,
    const std::function<std::unique_ptr<Optimizer>(std::vector<FlatSlab>)>& make,
    std::chrono::milliseconds timeout) {
  if (!communicator) throw ConfigError("sharded optimizer: no communicator");
  if (logical_numel.size() != slabs.size()) {
    throw ConfigError("sharded optimizer: " + std::to_string(logical_numel.size()) + " logical lengths for " +
                      std::to_string(slabs.size()) + " slabs");
  }
  // ZeRO-1: one piece per slab; its gradient is the slice of the full one.
  const int64_t world = communicator->size(), rank = communicator->rank();
  ShardLayout layout;
  for (size_t i = 0; i < slabs.size(); ++i) {
    const int64_t numel = slabs[i].param.numel();
    if (numel % world != 0 || logical_numel[i] > numel || logical_numel[i] < 0) {
      throw ConfigError("sharded optimizer: slab " + std::to_string(i) + " has " + std::to_string(numel) +
                        " elements (" + std::to_string(logical_numel[i]) + " used); expected a multiple of the " +
                        std::to_string(world) + " ranks (DataParallelOptions::slab_multiple)");
    }
    layout.params.push_back(slabs[i].param);
    layout.numel.push_back(numel);
    layout.weight_decay.push_back(slabs[i].weight_decay);
    layout.pieces.push_back({static_cast<int>(i), 0, numel, 0, logical_numel[i]});
    layout.grads.push_back(slabs[i].grad.narrow(0, rank * (numel / world), numel / world));
  }
  layout.logical_numel = std::move(logical_numel);
  return makeSharded(std::move(slabs), std::move(layout), std::move(communicator), make, timeout);
}

std::unique_ptr<Optimizer> makeShardedOptimizer(
    ShardLayout layout, std::shared_ptr<Communicator> communicator,
    const std::function<std::unique_ptr<Optimizer>(std::vector<FlatSlab>)>& make,
    std::chrono::milliseconds timeout) {
  if (!communicator) throw ConfigError("sharded optimizer: no communicator");
  return makeSharded({}, std::move(layout), std::move(communicator), make, timeout);
}

torch::Tensor clipGradNormOnDevice(const std::vector<FlatSlab>& slabs, double max_norm, Communicator& communicator,
                                   std::chrono::milliseconds timeout) {
  if (!(max_norm > 0)) {
    throw ConfigError("clipGradNorm: invalid max_norm " + std::to_string(max_norm) + " (expected > 0)");
  }
  if (slabs.empty()) {
    throw ConfigError("clipGradNorm: rank " + std::to_string(communicator.rank()) +
                      " holds no gradient slices (every rank takes part in the norm's all-reduce)");
  }
  torch::NoGradGuard no_grad;
  // This rank's squares, summed over the ranks: the global squared norm.
  const torch::Tensor squares = gradSquaredNorm(slabs).contiguous();
  AllreduceOptions options;
  options.op = ReduceOp::kSum;
  options.timeout = timeout;
  void* stream = currentStreamOf(squares);
  auto work = communicator.allreduce(bufferOf(squares, stream), bufferOf(squares, stream), options);
  if (!squares.is_cuda()) work->wait(timeout);  // on CUDA the stream is ordered after it
  const torch::Tensor total = squares.sqrt();
  clipGradsWithNorm(slabs, total, max_norm);
  return total;
}

double clipGradNorm(const std::vector<FlatSlab>& slabs, double max_norm, Communicator& communicator,
                    std::chrono::milliseconds timeout) {
  return clipGradNormOnDevice(slabs, max_norm, communicator, timeout).item<double>();
}

}  // namespace dtrain
