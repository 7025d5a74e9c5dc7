#include "models/activation_checkpoint.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <optional>

#include "libtorch/compat.h"
#include "models/fp8_linear.h"

namespace dtrain::models {
namespace {

// The autocast state of the thread that ran the forward, for the
// recomputation (backward runs on autograd's threads, whose own state is
// off).
struct AutocastState {
  bool cpu = false, cuda = false;
  at::ScalarType cpu_dtype = at::kBFloat16, cuda_dtype = at::kHalf;
  bool fp8 = false;  // an Fp8Scope was open: the recomputation's products are FP8 too

  static AutocastState current() {
    AutocastState s;
    s.fp8 = Fp8Scope::active();
    s.cpu = compat::isAutocastEnabled(c10::DeviceType::CPU);
    s.cuda = compat::isAutocastEnabled(c10::DeviceType::CUDA);
    s.cpu_dtype = compat::autocastDtype(c10::DeviceType::CPU);
    s.cuda_dtype = compat::autocastDtype(c10::DeviceType::CUDA);
    return s;
  }
  void apply() const {
    compat::setAutocastEnabled(c10::DeviceType::CPU, cpu);
    compat::setAutocastEnabled(c10::DeviceType::CUDA, cuda);
    compat::setAutocastDtype(c10::DeviceType::CPU, cpu_dtype);
    compat::setAutocastDtype(c10::DeviceType::CUDA, cuda_dtype);
  }
};

// Puts a state in force for its scope. Autocast's cache of cast weights
// is emptied on the way out: autograd's threads live across steps, and a
// cached cast would outlive the weights' next update.
class AutocastScope {
 public:
  explicit AutocastScope(const AutocastState& state) : saved_(AutocastState::current()) {
    state.apply();
    if (state.fp8) fp8_.emplace();
  }
  ~AutocastScope() {
    at::autocast::clear_cache();
    saved_.apply();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  AutocastState saved_;
  std::optional<Fp8Scope> fp8_;
};

class CheckpointBackward : public torch::autograd::Node {
 public:
  CheckpointBackward(CheckpointedFn fn, std::vector<torch::Tensor> inputs, AutocastState autocast)
      : Node(torch::autograd::collect_next_edges(inputs)),
        fn_(std::move(fn)),
        inputs_(std::move(inputs)),
        autocast_(autocast) {}

  std::string name() const override { return "dtrain::models::CheckpointBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    std::vector<torch::Tensor> detached;
    for (const torch::Tensor& t : inputs_) {
      detached.push_back(t.defined() ? t.detach().requires_grad_(t.requires_grad()) : t);
    }
    std::vector<torch::Tensor> outputs;
    {
      torch::AutoGradMode enable(true);
      AutocastScope scope(autocast_);
      outputs = fn_(detached);
    }
    std::vector<torch::Tensor> roots, root_grads;
    for (size_t i = 0; i < outputs.size() && i < grads.size(); ++i) {
      if (outputs[i].defined() && outputs[i].requires_grad() && grads[i].defined()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grads[i]);
      }
    }
    // A nested backward through the recomputation: the parameters fn read
    // accumulate their gradients, the detached inputs get theirs.
    if (!roots.empty()) torch::autograd::backward(roots, root_grads);
    torch::autograd::variable_list input_grads;
    for (const torch::Tensor& d : detached) {
      input_grads.push_back(d.defined() && d.requires_grad() ? d.grad() : torch::Tensor());
    }
    inputs_.clear();  // the graph is not kept: free the inputs now
    return input_grads;
  }

 private:
  CheckpointedFn fn_;
  std::vector<torch::Tensor> inputs_;
  AutocastState autocast_;
};

}  // namespace

std::vector<torch::Tensor> checkpointed(CheckpointedFn fn, const std::vector<torch::Tensor>& inputs) {
  if (!torch::GradMode::is_enabled()) return fn(inputs);
  std::vector<torch::Tensor> outputs;
  {
    torch::NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  auto node = std::make_shared<CheckpointBackward>(std::move(fn), inputs, AutocastState::current());
  for (torch::Tensor& out : outputs) {
    // Outputs computed without grad mode: fresh tensors this node may own.
    torch::autograd::set_history(out, node);
  }
  return outputs;
}

}  // namespace dtrain::models
