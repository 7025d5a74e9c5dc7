#include "store/store.h"

namespace dtrain {

void storeBarrier(Store& store, const std::string& name, int world_size,
                  std::chrono::milliseconds timeout) {
  const std::string done_key = name + "/done";
  if (store.add(name + "/count", 1) == world_size) store.set(done_key, "1");
  store.wait({done_key}, timeout);
}

}  // namespace dtrain
