// Mixed precision: an autocast scope (torch.autocast) and a loss scaler
// (torch.cuda.amp.GradScaler) over flat slabs.
//
//   dtrain::GradScaler scaler({.enabled = precision == dtrain::Precision::kFp16});
//   { dtrain::AutocastGuard autocast(device, precision); loss = criterion(model(x), y); }
//   scaler.scale(loss).backward();
//   scaler.unscale(opt->slabs()); dtrain::clipGradNorm(opt->slabs(), 1.0);  // optional
//   scaler.step(*opt);  // skips the step on inf/nan and updates the scale
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "dtrain/optim.h"

namespace dtrain {

namespace models {
class Fp8Scope;
}

// kFp8: bf16 autocast, and the transformer blocks' linear layers in FP8
// (models/fp8_linear.h; CUDA GPUs of compute capability 8.9 and newer).
enum class Precision { kFp32, kBf16, kFp16, kFp8 };

// "fp32" | "bf16" | "fp16" | "fp8", or "float32" | "bfloat16" | "float16",
// any case. ConfigError listing the valid names otherwise.
Precision parsePrecision(const std::string& text);
const char* precisionName(Precision precision);  // "fp32" / "bf16" / "fp16" / "fp8"

// RAII autocast scope, as torch.autocast(device.type(), dtype): enables
// autocast for the device's type with the precision's dtype (nothing at all
// for fp32). On destruction restores the previous enabled flag and dtype,
// and clears the cast cache when the outermost scope ends. Scopes nest.
// ConfigError for a device other than CPU or CUDA, and for fp16 on the CPU
// with libtorch older than 2.4 (whose CPU autocast knows bf16 only).
// Thread-local, like autocast itself: destroy it on the creating thread.
// fp8: bf16 autocast and an FP8 product scope (models::Fp8Scope); a
// ConfigError on a device FP8 cannot run on.
class AutocastGuard {
 public:
  AutocastGuard(torch::Device device, Precision precision);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_type_ = c10::DeviceType::CPU;
  bool previous_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kFloat;
  std::unique_ptr<models::Fp8Scope> fp8_;
};

struct GradScalerOptions {
  double init_scale = 65536.0;  // > 0
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  int64_t growth_interval = 2000;  // > 0
  bool enabled = true;
};

// torch.cuda.amp.GradScaler over flat slabs (any one device; CPU too).
// The scale and the inf/nan flag stay on the slabs' device; step() reads the
// flag once to decide the skip. Disabled, every call is a pass-through:
// scale() returns the loss, unscale() true, step() always steps.
class GradScaler {
 public:
  // ConfigError for options outside the ranges above.
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (the loss itself when disabled).
  torch::Tensor scale(const torch::Tensor& loss) const;
  // Divides every slab grad by the scale in place and checks them for
  // inf/nan; true when all finite. Once per update(): a second call before
  // update() returns the first call's answer and unscales nothing.
  // ConfigError when the slab grads are on more than one device.
  bool unscale(const std::vector<FlatSlab>& slabs);
  // unscale(optimizer.slabs()) unless done since the last update, then
  // optimizer.step() only when every grad is finite, then update().
  // True when the step was taken.
  bool step(Optimizer& optimizer);
  // After an unscale(): back off on inf/nan, grow after growth_interval
  // finite steps in a row (torch's _amp_update_scale_). ConfigError when no
  // unscale() came since the last update.
  void update();

  bool enabled() const { return options_.enabled; }
  double currentScale() const;  // 1.0 when disabled
  // Sharded gradients (each rank unscales only its shard): every rank's
  // inf/nan flag must count, or ranks would disagree on skipping a step.
  // `reduce` gets this rank's flag (float32, 0-dim, on the gradients'
  // device) and must leave the maximum over all ranks in it (an all-reduce:
  // every rank's unscale() calls it at the same point). Set before training.
  void setFoundInfReduction(std::function<void(torch::Tensor& found_inf)> reduce) {
    reduce_found_inf_ = std::move(reduce);
  }
  // "scaler.scale" (float32 scalar), "scaler.growth_tracker" (int64 scalar),
  // CPU copies; empty when disabled (like torch's).
  std::map<std::string, torch::Tensor> stateDict() const;
  // ConfigError naming a missing key or a bad value. Ignored when disabled.
  void loadStateDict(const std::map<std::string, torch::Tensor>& state);

 private:
  void moveTo(const torch::Device& device) const;

  GradScalerOptions options_;
  // Moved lazily to the device of the loss/grads (hence mutable).
  mutable torch::Tensor scale_;           // float32, 0-dim
  mutable torch::Tensor growth_tracker_;  // int32, 0-dim
  torch::Tensor found_inf_;               // float32, 0-dim; set by unscale()
  bool unscaled_ = false;                 // unscale() ran since the last update()
  bool all_finite_ = true;                // its answer
  std::function<void(torch::Tensor&)> reduce_found_inf_;
};

}  // namespace dtrain
