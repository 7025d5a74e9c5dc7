#include "dtrain/optim.h"

#include <cmath>
#include <sstream>

#include "common/error.h"
#include "common/text.h"

#if DTRAIN_FUSED_ADAMW
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "gpu/cuda_check.h"
#include "models/fused_kernels_setting.h"
#include "models/kernels/optimizer.h"
#endif

namespace dtrain {
namespace {

using TensorMap = std::map<std::string, torch::Tensor>;

std::string shapeOf(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes() << " " << t.scalar_type();
  return out.str();
}

// The negated comparisons reject NaN too.
void requireAtLeast(const std::string& who, const char* field, double value, double min) {
  if (!(value >= min)) {
    throw ConfigError(who + ": invalid " + field + " " + numberText(value) + " (expected >= " + numberText(min) + ")");
  }
}

torch::Tensor stepTensor(int64_t step) { return torch::tensor(step, torch::kLong); }

#if DTRAIN_FUSED_ADAMW
// CUDA fp32 slabs take the fused kernels (models/kernels/optimizer.h) in
// builds that have them, unless DTRAIN_FUSED_KERNELS=0.
bool fusedSlab(const torch::Tensor& t) {
  return t.is_cuda() && t.scalar_type() == torch::kFloat && models::fusedKernelsSetting();
}
#endif

// AdamW::trackAbsoluteMaxima's tiles (int64 [tiles, 3] on the device)
// and maxima (int32 [ranges]) of a slab.
struct SlabMaxima {
  torch::Tensor tiles;
  torch::Tensor amax_bits;
};

// The capturable AdamW step of one slab in one kernel (lr and the step
// count, this step included, read on the device), with the maxima of the
// slab's ranges where `maxima` is given; false where the kernel does not
// apply and the torch operations must run.

bool fusedAdamWStep(const FlatSlab& slab, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq,
                    const torch::Tensor& lr, const torch::Tensor& step, const AdamWOptions& options,
                    const SlabMaxima* maxima = nullptr) {
#if DTRAIN_FUSED_ADAMW
  if (!fusedSlab(slab.param) || lr.device() != slab.param.device()) return false;
  const c10::cuda::CUDAGuard device(slab.param.device());
  kernels::AdamWArgs a;
  a.param = slab.param.data_ptr<float>();
  a.grad = slab.grad.data_ptr<float>();
  a.exp_avg = exp_avg.data_ptr<float>();
  a.exp_avg_sq = exp_avg_sq.data_ptr<float>();
  a.n = slab.param.numel();
  a.lr = lr.data_ptr<float>();
  a.step = step.data_ptr<float>();
  a.beta1 = options.beta1;
  a.beta2 = options.beta2;
  a.eps = options.eps;
  a.weight_decay = slab.weight_decay ? options.weight_decay : 0.0;
  if (maxima != nullptr && maxima->amax_bits.defined()) {
    static_assert(sizeof(kernels::AdamWTile) == 3 * sizeof(int64_t));
    a.tiles = reinterpret_cast<const kernels::AdamWTile*>(maxima->tiles.data_ptr<int64_t>());
    a.tile_count = maxima->tiles.size(0);
    a.amax_bits = reinterpret_cast<uint32_t*>(maxima->amax_bits.data_ptr<int32_t>());
    a.ranges = maxima->amax_bits.numel();
  }
  DTRAIN_CUDA_CHECK(kernels::adamw_step(a, c10::cuda::getCurrentCUDAStream(slab.param.device().index()).stream()));
  return true;
#else
  (void)slab, (void)exp_avg, (void)exp_avg_sq, (void)lr, (void)step, (void)options, (void)maxima;
  return false;
#endif
}

// The squared L2 norm of a gradient slab, a float64 scalar on its device,
// by the fused kernel (fixed order, float64 sums); undefined where it does
// not apply.
torch::Tensor fusedSquaredNorm(const torch::Tensor& grad) {
#if DTRAIN_FUSED_ADAMW
  if (!fusedSlab(grad)) return torch::Tensor();
  const c10::cuda::CUDAGuard device(grad.device());
  const size_t bytes = kernels::squared_norm_workspace_size(grad.numel());
  const torch::Tensor workspace =
      torch::empty({static_cast<int64_t>(bytes < 16 ? 16 : bytes)}, grad.options().dtype(torch::kByte));
  torch::Tensor out = torch::empty({}, grad.options().dtype(torch::kDouble));
  DTRAIN_CUDA_CHECK(kernels::squared_norm(out.data_ptr<double>(), false, grad.data_ptr<float>(), grad.numel(),
                                          workspace.data_ptr(), bytes,
                                          c10::cuda::getCurrentCUDAStream(grad.device().index()).stream()));
  return out;
#else
  (void)grad;
  return torch::Tensor();
#endif
}

// Checks that `state` holds every key of `live` with the same shape and dtype.
void requireSameKeys(const std::string& who, const TensorMap& live, const TensorMap& state) {
  for (const auto& [key, tensor] : live) {
    auto it = state.find(key);
    if (it == state.end()) throw ConfigError(who + " state: missing key '" + key + "'");
    if (!it->second.defined() || it->second.sizes() != tensor.sizes() ||
        it->second.scalar_type() != tensor.scalar_type()) {
      throw ConfigError(who + " state: '" + key + "' is " +
                        (it->second.defined() ? shapeOf(it->second) : std::string("undefined")) + ", expected " +
                        shapeOf(tensor));
    }
  }
}

// Copies `state` into the live tensors and returns the step count it holds.
int64_t loadInto(const std::string& who, const TensorMap& live, const TensorMap& state, const std::string& step_key) {
  requireSameKeys(who, live, state);
  const int64_t step = state.at(step_key).item<int64_t>();
  if (step < 0) throw ConfigError(who + " state: '" + step_key + "' is " + std::to_string(step) + ", expected >= 0");
  torch::NoGradGuard no_grad;
  for (const auto& [key, tensor] : live) {
    if (key != step_key) tensor.copy_(state.at(key));
  }
  return step;
}

class SGD final : public Optimizer {
 public:
  SGD(std::vector<FlatSlab> slabs, const SGDOptions& options)
      : Optimizer(std::move(slabs), options.lr, "SGD"), options_(options) {
    if (options_.momentum != 0) {
      for (const FlatSlab& slab : slabs_) momentum_.push_back(torch::zeros_like(slab.param));
    }
  }

  void step() override {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < slabs_.size(); ++i) {
      torch::Tensor d_p = slabs_[i].grad;
      if (options_.weight_decay != 0 && slabs_[i].weight_decay) d_p = d_p.add(slabs_[i].param, options_.weight_decay);
      if (options_.momentum != 0) {
        torch::Tensor& buf = momentum_[i];
        if (steps_ == 0 && !capturable_) {
          buf.copy_(d_p);  // torch.optim.SGD: the first buffer is a clone of d_p, undamped
        } else {
          buf.mul_(options_.momentum).add_(d_p, 1 - options_.dampening);
        }
        d_p = options_.nesterov ? d_p.add(buf, options_.momentum) : buf;
      }
      if (capturable_) {
        slabs_[i].param.addcmul_(d_p, lrTensor(), -1);  // param -= lr * d_p, lr read on the device
      } else {
        slabs_[i].param.add_(d_p, -lr_);
      }
    }
    if (!capturable_) ++steps_;
  }

  TensorMap stateDict() const override {
    TensorMap state{{"sgd.step", stepTensor(steps_)}};
    for (size_t i = 0; i < momentum_.size(); ++i) state["sgd.momentum." + std::to_string(i)] = momentum_[i];
    return state;
  }

  void loadStateDict(const TensorMap& state) override { steps_ = loadInto("SGD", stateDict(), state, "sgd.step"); }

  std::string name() const override { return "sgd"; }

  std::vector<LocalOptimizerState> localState() const override {
    std::vector<LocalOptimizerState> state;
    for (size_t i = 0; i < momentum_.size(); ++i) state.push_back({"sgd.momentum", static_cast<int>(i), 0, momentum_[i]});
    return state;
  }

 protected:
  void onCapturableChanged() override {
    if (capturable_ && options_.momentum != 0 && steps_ == 0) {
      capturable_ = false;
      throw ConfigError("SGD: capturable mode with momentum needs one step taken first (it initialises the "
                        "momentum buffer)");
    }
  }

 private:
  SGDOptions options_;
  std::vector<torch::Tensor> momentum_;
};

class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<FlatSlab> slabs, const AdamWOptions& options)
      : Optimizer(std::move(slabs), options.lr, "AdamW"), options_(options) {
    for (const FlatSlab& slab : slabs_) {
      exp_avg_.push_back(torch::zeros_like(slab.param));
      exp_avg_sq_.push_back(torch::zeros_like(slab.param));
    }
  }

  void step() override {
    torch::NoGradGuard no_grad;
    if (capturable_) {
      stepOnDevice();
      return;
    }
    maxima_current_ = false;
    ++steps_;
    const double bias_correction1 = 1 - std::pow(options_.beta1, static_cast<double>(steps_));
    const double bias_correction2 = 1 - std::pow(options_.beta2, static_cast<double>(steps_));
    const double step_size = lr_ / bias_correction1;
    const double bias_correction2_sqrt = std::sqrt(bias_correction2);
    for (size_t i = 0; i < slabs_.size(); ++i) {
      torch::Tensor& param = slabs_[i].param;
      const torch::Tensor& grad = slabs_[i].grad;
      if (slabs_[i].weight_decay) param.mul_(1 - lr_ * options_.weight_decay);
      exp_avg_[i].lerp_(grad, 1 - options_.beta1);
      exp_avg_sq_[i].mul_(options_.beta2).addcmul_(grad, grad, 1 - options_.beta2);
      torch::Tensor denom = exp_avg_sq_[i].sqrt().div_(bias_correction2_sqrt).add_(options_.eps);
      param.addcdiv_(exp_avg_[i], denom, -step_size);
    }
  }

  TensorMap stateDict() const override {
    TensorMap state{{"adamw.step", stepTensor(steps_)}};
    for (size_t i = 0; i < slabs_.size(); ++i) {
      state["adamw.exp_avg." + std::to_string(i)] = exp_avg_[i];
      state["adamw.exp_avg_sq." + std::to_string(i)] = exp_avg_sq_[i];
    }
    return state;
  }

  void loadStateDict(const TensorMap& state) override {
    steps_ = loadInto("AdamW", stateDict(), state, "adamw.step");
    if (step_tensor_.defined()) step_tensor_.fill_(static_cast<double>(steps_));
  }

  std::string name() const override { return "adamw"; }

  torch::Tensor trackAbsoluteMaxima(int slab, const std::vector<std::pair<int64_t, int64_t>>& ranges) override {
#if DTRAIN_FUSED_ADAMW
    if (slab < 0 || static_cast<size_t>(slab) >= slabs_.size()) {
      throw ConfigError("AdamW: trackAbsoluteMaxima of slab " + std::to_string(slab) + " (it has " +
                        std::to_string(slabs_.size()) + ")");
    }
    if (maxima_.size() < slabs_.size()) maxima_.resize(slabs_.size());
    maxima_[slab] = SlabMaxima{};
    const torch::Tensor& param = slabs_[slab].param;
    if (ranges.empty() || !fusedSlab(param)) return {};
    const std::vector<kernels::AdamWTile> tiles = kernels::adamw_tiles(param.numel(), ranges);
    if (tiles.empty()) {
      throw ConfigError("AdamW: trackAbsoluteMaxima of slab " + std::to_string(slab) +
                        ": the ranges must be sorted, not overlapping and within its " +
                        std::to_string(param.numel()) + " elements");
    }
    std::vector<int64_t> flat;
    flat.reserve(tiles.size() * 3);
    for (const kernels::AdamWTile& t : tiles) flat.insert(flat.end(), {t.begin, t.end, t.range});
    maxima_[slab].tiles = torch::tensor(flat, torch::kLong).reshape({-1, 3}).to(param.device());
    maxima_[slab].amax_bits = torch::zeros({static_cast<int64_t>(ranges.size())}, param.options().dtype(torch::kInt));
    maxima_current_ = false;
    return maxima_[slab].amax_bits;
#else
    (void)slab, (void)ranges;
    return {};
#endif
  }

  bool absoluteMaximaCurrent() const override { return maxima_current_; }

  std::vector<LocalOptimizerState> localState() const override {
    std::vector<LocalOptimizerState> state;
    for (size_t i = 0; i < slabs_.size(); ++i) {
      state.push_back({"adamw.exp_avg", static_cast<int>(i), 0, exp_avg_[i]});
      state.push_back({"adamw.exp_avg_sq", static_cast<int>(i), 0, exp_avg_sq_[i]});
    }
    return state;
  }

  void setStepCount(int64_t steps) override {
    Optimizer::setStepCount(steps);
    if (step_tensor_.defined()) step_tensor_.fill_(static_cast<double>(steps_));
  }

 protected:
  void onCapturableChanged() override {
    if (capturable_) {
      step_tensor_ = torch::full({1}, static_cast<double>(steps_), lrTensor().options());
    }
  }

 private:
  // torch.optim.AdamW(capturable=True)'s arithmetic: the step count and the
  // bias corrections stay on the device. One fused kernel per slab where it
  // applies, else ~8 torch operations.
  void stepOnDevice() {
    step_tensor_.add_(1);
    std::vector<size_t> unfused;
    maxima_current_ = true;
    for (size_t i = 0; i < slabs_.size(); ++i) {
      const SlabMaxima* maxima = i < maxima_.size() && maxima_[i].amax_bits.defined() ? &maxima_[i] : nullptr;
      if (!fusedAdamWStep(slabs_[i], exp_avg_[i], exp_avg_sq_[i], lrTensor(), step_tensor_, options_, maxima)) {
        unfused.push_back(i);
        if (maxima != nullptr) maxima_current_ = false;
      }
    }
    if (unfused.empty()) return;
    const torch::Tensor bias_correction1 = 1 - torch::pow(options_.beta1, step_tensor_);
    const torch::Tensor bias_correction2_sqrt = (1 - torch::pow(options_.beta2, step_tensor_)).sqrt_();
    const torch::Tensor step_size = lrTensor() / bias_correction1;
    for (size_t i : unfused) {
      torch::Tensor& param = slabs_[i].param;
      const torch::Tensor& grad = slabs_[i].grad;
      if (slabs_[i].weight_decay) param.addcmul_(param, lrTensor(), -options_.weight_decay);  // param *= 1 - lr * wd
      exp_avg_[i].lerp_(grad, 1 - options_.beta1);
      exp_avg_sq_[i].mul_(options_.beta2).addcmul_(grad, grad, 1 - options_.beta2);
      torch::Tensor denom = (exp_avg_sq_[i].sqrt() / bias_correction2_sqrt).add_(options_.eps);
      param.sub_(exp_avg_[i] / denom * step_size);
    }
  }

  AdamWOptions options_;
  std::vector<torch::Tensor> exp_avg_;
  std::vector<torch::Tensor> exp_avg_sq_;
  torch::Tensor step_tensor_;  // capturable mode: float32 [1] on the device
  std::vector<SlabMaxima> maxima_;  // per slab (trackAbsoluteMaxima)
  bool maxima_current_ = false;
};

}  // namespace

Optimizer::Optimizer(std::vector<FlatSlab> slabs, double lr, const std::string& who)
    : slabs_(std::move(slabs)), lr_(lr) {
  requireAtLeast(who, "lr", lr, 0);
  for (size_t i = 0; i < slabs_.size(); ++i) {
    const std::string slab = who + ": slab " + std::to_string(i);
    const torch::Tensor& param = slabs_[i].param;
    const torch::Tensor& grad = slabs_[i].grad;
    if (!param.defined() || !grad.defined()) throw ConfigError(slab + " has an undefined param or grad");
    if (param.scalar_type() != torch::kFloat && param.scalar_type() != torch::kDouble) {
      throw ConfigError(slab + " has dtype " + std::string(c10::toString(param.scalar_type())) +
                        " (expected Float or Double)");
    }
    if (param.dim() != 1 || !param.is_contiguous()) {
      throw ConfigError(slab + " param is not a contiguous 1-D tensor (sizes " + shapeOf(param) + ")");
    }
    if (grad.scalar_type() != param.scalar_type() || grad.device() != param.device() ||
        grad.sizes() != param.sizes()) {
      throw ConfigError(slab + " grad (" + shapeOf(grad) + " on " + grad.device().str() +
                        ") does not match its param (" + shapeOf(param) + " on " + param.device().str() + ")");
    }
  }
}

void Optimizer::setLr(double lr) {
  requireAtLeast(name(), "lr", lr, 0);
  lr_ = lr;
  if (capturable_) lr_tensor_.fill_(lr);  // a device write, no synchronisation
}

void Optimizer::setCapturable(bool on) {
  if (on == capturable_) return;
  if (on && slabs_.empty()) throw ConfigError(name() + ": capturable mode needs at least one slab");
  if (on && !lr_tensor_.defined()) {
    lr_tensor_ = torch::full({1}, lr_, slabs_.front().param.options().dtype(torch::kFloat));
  }
  capturable_ = on;
  onCapturableChanged();
  if (capturable_) lr_tensor_.fill_(lr_);
}

void Optimizer::setStepCount(int64_t steps) {
  if (steps < 0) throw ConfigError(name() + ": step count " + std::to_string(steps) + ", expected >= 0");
  steps_ = steps;
}

torch::Tensor Optimizer::trackAbsoluteMaxima(int, const std::vector<std::pair<int64_t, int64_t>>&) { return {}; }

int64_t Optimizer::stateBytes() const {
  int64_t bytes = 0;
  for (const auto& [key, tensor] : stateDict()) bytes += tensor.numel() * static_cast<int64_t>(tensor.element_size());
  return bytes;
}

void Optimizer::zeroGrad() {
  torch::NoGradGuard no_grad;
  for (FlatSlab& slab : slabs_) slab.grad.zero_();
}

std::unique_ptr<Optimizer> makeSGD(std::vector<FlatSlab> slabs, const SGDOptions& options) {
  requireAtLeast("SGD", "momentum", options.momentum, 0);
  requireAtLeast("SGD", "weight_decay", options.weight_decay, 0);
  if (!std::isfinite(options.dampening)) throw ConfigError("SGD: invalid dampening " + numberText(options.dampening));
  if (options.nesterov && (options.momentum <= 0 || options.dampening != 0)) {
    throw ConfigError("SGD: nesterov momentum requires momentum > 0 and dampening 0 (got momentum " +
                      numberText(options.momentum) + ", dampening " + numberText(options.dampening) + ")");
  }
  return std::make_unique<SGD>(std::move(slabs), options);
}

std::unique_ptr<Optimizer> makeAdamW(std::vector<FlatSlab> slabs, const AdamWOptions& options) {
  for (auto [field, beta] : {std::pair{"beta1", options.beta1}, std::pair{"beta2", options.beta2}}) {
    if (!(beta >= 0 && beta < 1)) {
      throw ConfigError(std::string("AdamW: invalid ") + field + " " + numberText(beta) + " (expected 0 <= " + field +
                        " < 1)");
    }
  }
  if (!(options.eps > 0)) throw ConfigError("AdamW: invalid eps " + numberText(options.eps) + " (expected > 0)");
  requireAtLeast("AdamW", "weight_decay", options.weight_decay, 0);
  return std::make_unique<AdamW>(std::move(slabs), options);
}

namespace {

void requireMaxNorm(double max_norm) {
  if (!(max_norm > 0)) throw ConfigError("clipGradNorm: invalid max_norm " + numberText(max_norm) + " (expected > 0)");
}

}  // namespace

torch::Tensor gradSquaredNorm(const std::vector<FlatSlab>& slabs) {
  if (slabs.empty()) return torch::zeros({}, torch::kDouble);
  torch::NoGradGuard no_grad;
  // Slabs may differ in dtype: sum the squares in float64 on the first
  // slab's device.
  torch::Tensor squares;
  for (const FlatSlab& slab : slabs) {
    torch::Tensor square = fusedSquaredNorm(slab.grad);
    square = square.defined() ? square.to(slabs.front().grad.device())
                              : slab.grad.norm().to(slabs.front().grad.device(), torch::kDouble).square();
    squares = squares.defined() ? squares + square : square;
  }
  return squares;
}

void clipGradsWithNorm(const std::vector<FlatSlab>& slabs, const torch::Tensor& total_norm, double max_norm) {
  requireMaxNorm(max_norm);
  torch::NoGradGuard no_grad;
  // min(1, max_norm / (total + 1e-6)), and 1 for a non-finite norm: the
  // decision is arithmetic on the device, never a branch on the host.
  const torch::Tensor coefficient = torch::where(torch::isfinite(total_norm),
                                                 (max_norm / (total_norm + 1e-6)).clamp_max(1.0),
                                                 torch::ones_like(total_norm));
  for (const FlatSlab& slab : slabs) slab.grad.mul_(coefficient.to(slab.grad.dtype()));
}

torch::Tensor clipGradNormOnDevice(const std::vector<FlatSlab>& slabs, double max_norm) {
  requireMaxNorm(max_norm);
  if (slabs.empty()) return torch::zeros({}, torch::kDouble);
  torch::NoGradGuard no_grad;
  const torch::Tensor total = gradSquaredNorm(slabs).sqrt();
  clipGradsWithNorm(slabs, total, max_norm);
  return total;
}

double clipGradNorm(const std::vector<FlatSlab>& slabs, double max_norm) {
  return clipGradNormOnDevice(slabs, max_norm).item<double>();
}

}  // namespace dtrain
