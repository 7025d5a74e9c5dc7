#include "store/store.h"

#include <algorithm>

namespace dtrain {
namespace {
thread_local std::chrono::steady_clock::time_point scope_deadline = std::chrono::steady_clock::time_point::max();
}  // namespace

StoreDeadlineScope::StoreDeadlineScope(std::chrono::milliseconds budget) : previous_(scope_deadline) {
  scope_deadline = std::min(scope_deadline, Clock::now() + budget);
}

StoreDeadlineScope::~StoreDeadlineScope() { scope_deadline = previous_; }

std::chrono::steady_clock::time_point storeDeadline() { return scope_deadline; }

std::chrono::milliseconds clampTimeout(std::chrono::milliseconds timeout) {
  constexpr std::chrono::milliseconds kYear{int64_t{365} * 24 * 3600 * 1000};
  return std::clamp(timeout, std::chrono::milliseconds(0), kYear);
}

void storeBarrier(Store& store, const std::string& name, int world_size,
                  std::chrono::milliseconds timeout) {
  const std::string done_key = name + "/done";
  if (store.add(name + "/count", 1) == world_size) store.set(done_key, "1");
  store.wait({done_key}, timeout);
}

}  // namespace dtrain
