// makeShardedOptimizer (optim.h): ZeRO stage 1 over DataParallel's slabs.
#include <cctype>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "dtrain/optim.h"
#include "train/tensor_buffer.h"

namespace dtrain {
namespace {

// The slab a per-slab state key names ("adamw.exp_avg.3" -> 3), or -1 for
// the others ("adamw.step").
int slabOfKey(const std::string& key) {
  const size_t dot = key.rfind('.');
  if (dot == std::string::npos || dot + 1 == key.size()) return -1;
  for (size_t i = dot + 1; i < key.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(key[i]))) return -1;
  }
  return std::stoi(key.substr(dot + 1));
}

class ShardedOptimizer : public Optimizer {
 public:
  ShardedOptimizer(std::vector<FlatSlab> slabs, std::vector<int64_t> logical, std::shared_ptr<Communicator> comm,
                   std::vector<FlatSlab> slices, std::unique_ptr<Optimizer> inner, std::chrono::milliseconds timeout)
      : Optimizer(std::move(slabs), inner->lr(), "sharded " + inner->name()),
        logical_(std::move(logical)),
        comm_(std::move(comm)),
        slices_(std::move(slices)),
        inner_(std::move(inner)),
        timeout_(timeout) {}

  void step() override {
    inner_->step();
    if (!capturable_) ++steps_;
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < slabs_.size(); ++i) {
      // In place: this rank's slice is its slot of the full slab.
      const torch::Tensor& full = slabs_[i].param;
      void* stream = currentStreamOf(full);
      AllgatherOptions options;
      options.timeout = timeout_;
      auto work = comm_->allgather(bufferOf(slices_[i].param, stream), bufferOf(full, stream), options);
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

  std::map<std::string, torch::Tensor> stateDict() const override {
    std::map<std::string, torch::Tensor> out;
    torch::NoGradGuard no_grad;
    for (const auto& [key, slice] : inner_->stateDict()) {
      const int slab = slabOfKey(key);
      if (slab < 0 || slab >= static_cast<int>(slabs_.size())) {
        out[key] = slice;
        continue;
      }
      const torch::Tensor full = torch::empty({slabs_[slab].param.numel()}, slice.options());
      void* stream = currentStreamOf(full);
      AllgatherOptions options;
      options.timeout = timeout_;
      auto work = comm_->allgather(bufferOf(slice.contiguous(), stream), bufferOf(full, stream), options);
      if (!full.is_cuda()) work->wait(timeout_);
      out[key] = full.narrow(0, 0, logical_[slab]);
    }
    return out;
  }

  void loadStateDict(const std::map<std::string, torch::Tensor>& state) override {
    std::map<std::string, torch::Tensor> inner;
    const int64_t rank = comm_->rank();
    torch::NoGradGuard no_grad;
    for (const auto& [key, tensor] : state) {
      const int slab = slabOfKey(key);
      if (slab < 0 || slab >= static_cast<int>(slabs_.size())) {
        inner[key] = tensor;
        continue;
      }
      if (tensor.dim() != 1 || tensor.numel() != logical_[slab]) {
        throw ConfigError(name() + ": state '" + key + "' has shape " + toString(tensor.sizes()) + "; expected [" +
                          std::to_string(logical_[slab]) + "] (slab " + std::to_string(slab) + ")");
      }
      const int64_t slice = slices_[slab].param.numel();
      const torch::Tensor padded = torch::zeros({slabs_[slab].param.numel()}, tensor.options());
      padded.narrow(0, 0, logical_[slab]).copy_(tensor);
      inner[key] = padded.narrow(0, rank * slice, slice);
    }
    inner_->loadStateDict(inner);
    steps_ = inner_->stepCount();
  }

  std::string name() const override { return inner_->name(); }
  int64_t stateBytes() const override { return inner_->stateBytes(); }

 protected:
  void onCapturableChanged() override { inner_->setCapturable(capturable_); }

 private:
  std::vector<int64_t> logical_;
  std::shared_ptr<Communicator> comm_;
  std::vector<FlatSlab> slices_;
  std::unique_ptr<Optimizer> inner_;
  std::chrono::milliseconds timeout_;
};

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
  const int64_t world = communicator->size(), rank = communicator->rank();
  std::vector<FlatSlab> slices;
  for (size_t i = 0; i < slabs.size(); ++i) {
    const int64_t numel = slabs[i].param.numel();
    if (numel % world != 0 || logical_numel[i] > numel || logical_numel[i] < 0) {
      throw ConfigError("sharded optimizer: slab " + std::to_string(i) + " has " + std::to_string(numel) +
                        " elements (" + std::to_string(logical_numel[i]) + " used); expected a multiple of the " +
                        std::to_string(world) + " ranks (DataParallelOptions::slab_multiple)");
    }
    const int64_t slice = numel / world;
    slices.push_back({slabs[i].param.narrow(0, rank * slice, slice), slabs[i].grad.narrow(0, rank * slice, slice),
                      slabs[i].weight_decay});
  }
  std::unique_ptr<Optimizer> inner = make(slices);
  return std::make_unique<ShardedOptimizer>(std::move(slabs), std::move(logical_numel), std::move(communicator),
                                            std::move(slices), std::move(inner), timeout);
}

}  // namespace dtrain
