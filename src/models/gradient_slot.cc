#include "models/gradient_slot.h"

#include "libtorch/compat.h"

#include <mutex>
#include <unordered_map>

namespace dtrain::models {
namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_map<const void*, GradientSlot*> slots;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: owners may unregister during exit
  return *r;
}

}  // namespace

void registerGradientSlot(const torch::Tensor& param, GradientSlot* slot) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.slots[param.unsafeGetTensorImpl()] = slot;
}

void unregisterGradientSlot(const torch::Tensor& param, const GradientSlot* slot) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.slots.find(param.unsafeGetTensorImpl());
  if (it != r.slots.end() && it->second == slot) r.slots.erase(it);
}

torch::Tensor takeStaleGradient(const torch::Tensor& param) {
  GradientSlot* slot = nullptr;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.slots.find(param.unsafeGetTensorImpl());
    if (it == r.slots.end()) return {};
    slot = it->second;
  }
  return slot->takeStale();
}

torch::Tensor weightGradient(const torch::Tensor& g, const torch::Tensor& x, const torch::Tensor& weight) {
  const torch::Tensor gt = g.t();
  torch::Tensor into = takeStaleGradient(weight);
  if (into.defined()) {
    compat::productInto(into, gt, x, /*accumulate=*/false);
    return {};
  }
  if (weight.scalar_type() == g.scalar_type()) return torch::mm(gt, x);
  torch::Tensor out = at::empty({g.size(1), x.size(1)}, g.options().dtype(weight.scalar_type()));
  compat::productInto(out, gt, x, /*accumulate=*/false);
  return out;
}

}  // namespace dtrain::models
