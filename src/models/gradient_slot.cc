#include "models/gradient_slot.h"

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

}  // namespace dtrain::models
