#include "comm/nccl/unique_id.h"

#include <cstring>

#include "comm/nccl/nccl_check.h"
#include "common/error.h"
#include "store/store.h"

namespace dtrain {

ncclUniqueId exchangeNcclUniqueId(Store& store, const std::string& key, int rank, Milliseconds timeout) {
  ncclUniqueId id;
  if (rank == 0) {
    DTRAIN_NCCL_CHECK(ncclGetUniqueId(&id));
    store.set(key, std::string(id.internal, sizeof(id.internal)));
    return id;
  }
  try {
    store.wait({key}, timeout);
  } catch (const TimeoutError& e) {
    throw TimeoutError("rank 0 did not publish the NCCL unique id under '" + key + "' within " +
                       std::to_string(timeout.count()) +
                       " ms (is rank 0 alive and using the same store prefix?): " + e.message());
  }
  const std::string value = store.get(key);
  if (value.size() != sizeof(id.internal)) {
    throw CommError("store key '" + key + "' holds " + std::to_string(value.size()) +
                    " bytes, not an NCCL unique id (" + std::to_string(sizeof(id.internal)) + " bytes)");
  }
  std::memcpy(id.internal, value.data(), sizeof(id.internal));
  return id;
}

}  // namespace dtrain
