#include "dtrain/amp.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "common/error.h"
#include "common/text.h"
#include "libtorch/compat.h"
#include "models/fp8_linear.h"

namespace dtrain {
Precision parsePrecision(const std::string& text) {
  std::string name = text;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name == "fp32" || name == "float32") return Precision::kFp32;
  if (name == "bf16" || name == "bfloat16") return Precision::kBf16;
  if (name == "fp16" || name == "float16") return Precision::kFp16;
  if (name == "fp8") return Precision::kFp8;
  throw ConfigError("precision '" + text +
                    "' is not known (expected fp32, bf16, fp16 or fp8; also float32, bfloat16, float16)");
}

const char* precisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    case Precision::kFp8: return "fp8";
  }
  return "unknown";
}

AutocastGuard::AutocastGuard(torch::Device device, Precision precision) {
  if (precision == Precision::kFp32) return;
  if (!device.is_cpu() && !device.is_cuda()) {
    throw ConfigError("autocast: device " + device.str() + " is not supported (expected cpu or cuda)");
  }
  if (device.is_cpu() && precision == Precision::kFp16 && !compat::kCpuAutocastSupportsFp16) {
    throw ConfigError("precision fp16 on the CPU needs libtorch 2.4 or newer (this libtorch's CPU autocast "
                      "supports bf16 only); use bf16 or fp32");
  }
  if (precision == Precision::kFp8) {
    const std::string why = models::fp8Unsupported(device);
    if (!why.empty()) throw ConfigError("precision fp8: " + why + "; use bf16");
    fp8_ = std::make_unique<models::Fp8Scope>();
  }
  device_type_ = device.type();
  previous_enabled_ = compat::isAutocastEnabled(device_type_);
  previous_dtype_ = compat::autocastDtype(device_type_);
  compat::setAutocastDtype(device_type_, precision == Precision::kFp16 ? at::kHalf : at::kBFloat16);
  compat::setAutocastEnabled(device_type_, true);
  at::autocast::increment_nesting();
  active_ = true;
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // As torch.autocast.__exit__: the cast cache lives until the outermost scope ends.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  compat::setAutocastEnabled(device_type_, previous_enabled_);
  compat::setAutocastDtype(device_type_, previous_dtype_);
}

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  if (!(options_.init_scale > 0) || !std::isfinite(options_.init_scale)) {
    throw ConfigError("GradScaler: init_scale " + numberText(options_.init_scale) + ", expected a finite value > 0");
  }
  if (!(options_.growth_factor > 1) || !std::isfinite(options_.growth_factor)) {
    throw ConfigError("GradScaler: growth_factor " + numberText(options_.growth_factor) + ", expected a finite value > 1");
  }
  if (!(options_.backoff_factor > 0 && options_.backoff_factor < 1)) {
    throw ConfigError("GradScaler: backoff_factor " + numberText(options_.backoff_factor) + ", expected 0 < value < 1");
  }
  if (options_.growth_interval <= 0) {
    throw ConfigError("GradScaler: growth_interval " + std::to_string(options_.growth_interval) + ", expected > 0");
  }
  scale_ = torch::tensor(static_cast<float>(options_.init_scale), torch::kFloat);
  growth_tracker_ = torch::tensor(0, torch::kInt);
}

void GradScaler::moveTo(const torch::Device& device) const {
  if (scale_.device() == device) return;
  scale_ = scale_.to(device);
  growth_tracker_ = growth_tracker_.to(device);
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const {
  if (!options_.enabled) return loss;
  moveTo(loss.device());
  return loss * scale_;
}

bool GradScaler::unscale(const std::vector<FlatSlab>& slabs) {
  if (!options_.enabled) return true;
  if (unscaled_) return all_finite_;
  if (slabs.empty()) {
    found_inf_ = torch::zeros({}, scale_.options());
    if (reduce_found_inf_) reduce_found_inf_(found_inf_);
    unscaled_ = true;
    all_finite_ = found_inf_.item<float>() == 0;
    return all_finite_;
  }
  const torch::Device device = slabs.front().grad.device();
  std::vector<torch::Tensor> grads;
  for (size_t i = 0; i < slabs.size(); ++i) {
    if (slabs[i].grad.device() != device) {
      throw ConfigError("GradScaler: slab " + std::to_string(i) + " grad is on " + slabs[i].grad.device().str() +
                        " but slab 0's on " + device.str() + " (expected one device)");
    }
    grads.push_back(slabs[i].grad);
  }
  torch::NoGradGuard no_grad;
  moveTo(device);
  // Like torch: invert in float64, then use the float32 reciprocal.
  const torch::Tensor inv_scale = scale_.to(torch::kDouble).reciprocal().to(torch::kFloat);
  found_inf_ = torch::zeros({}, scale_.options());
  if (device.is_cuda()) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
  } else {
    // libtorch 1.13 has no CPU kernel for the fused op; the same with plain ops.
    for (torch::Tensor& grad : grads) {
      found_inf_ = torch::maximum(found_inf_, grad.isfinite().logical_not().any().to(torch::kFloat));
      grad.mul_(inv_scale);
    }
  }
  if (reduce_found_inf_) reduce_found_inf_(found_inf_);  // the other ranks' shards count too
  unscaled_ = true;
  all_finite_ = found_inf_.item<float>() == 0;  // the one device read
  return all_finite_;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  const bool finite = unscale(optimizer.slabs());
  if (finite) optimizer.step();
  update();
  return finite;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  if (!unscaled_) {
    throw ConfigError("GradScaler::update(): no inf/nan check since the last update (call unscale() or step())");
  }
  torch::NoGradGuard no_grad;
  if (scale_.is_cuda()) {
    at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor, options_.backoff_factor,
                           options_.growth_interval);
  } else {
    // _amp_update_scale_'s arithmetic (float32 scale, a grown scale kept only when finite).
    float scale = scale_.item<float>();
    int32_t tracker = growth_tracker_.item<int32_t>();
    if (!all_finite_) {
      scale = static_cast<float>(scale * options_.backoff_factor);
      tracker = 0;
    } else if (tracker + 1 == options_.growth_interval) {
      const float grown = static_cast<float>(scale * options_.growth_factor);
      if (std::isfinite(grown)) scale = grown;
      tracker = 0;
    } else {
      ++tracker;
    }
    scale_.fill_(scale);
    growth_tracker_.fill_(tracker);
  }
  unscaled_ = false;
}

double GradScaler::currentScale() const {
  if (!options_.enabled) return 1.0;
  return scale_.item<float>();
}

std::map<std::string, torch::Tensor> GradScaler::stateDict() const {
  if (!options_.enabled) return {};
  return {{"scaler.scale", scale_.to(torch::kCPU).clone()},
          {"scaler.growth_tracker", growth_tracker_.to(torch::kCPU, torch::kLong)}};
}

void GradScaler::loadStateDict(const std::map<std::string, torch::Tensor>& state) {
  if (!options_.enabled) return;
  auto scalar = [&](const std::string& key, bool floating) {
    auto it = state.find(key);
    if (it == state.end()) {
      throw ConfigError("GradScaler state: missing key '" + key + "' (saved with the scaler disabled?)");
    }
    const torch::Tensor& t = it->second;
    if (!t.defined() || t.numel() != 1 || t.is_floating_point() != floating) {
      throw ConfigError("GradScaler state: '" + key + "' must be one " + (floating ? "floating" : "integer") +
                        " value");
    }
    return t.to(torch::kCPU, torch::kDouble).item<double>();
  };
  const double scale = scalar("scaler.scale", true);
  const double tracker = scalar("scaler.growth_tracker", false);
  if (!(scale > 0) || !std::isfinite(scale)) {
    throw ConfigError("GradScaler state: 'scaler.scale' is " + numberText(scale) + ", expected a finite value > 0");
  }
  if (tracker < 0) {
    throw ConfigError("GradScaler state: 'scaler.growth_tracker' is " + numberText(tracker) + ", expected >= 0");
  }
  scale_.fill_(scale);
  // Saved under a longer growth_interval: grow at the next finite step.
  growth_tracker_.fill_(std::min(static_cast<int64_t>(tracker), options_.growth_interval - 1));
  unscaled_ = false;
}

}  // namespace dtrain
