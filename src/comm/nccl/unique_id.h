// Distribution of the NCCL unique id through the rendezvous store.
#pragma once

#include <nccl.h>

#include <string>

#include "comm/types.h"

namespace dtrain {

class Store;

// Rank 0 creates the id (ncclGetUniqueId, which also starts NCCL's bootstrap
// listener on this host) and sets it under `key`; every other rank waits up to
// `timeout` for the key and reads it. The store is already scoped to this
// attempt's generation, so a restarted group never reads a stale id.
// Throws TimeoutError naming the key when rank 0 never publishes it,
// CommError when NCCL fails or the stored value is not an id.
ncclUniqueId exchangeNcclUniqueId(Store& store, const std::string& key, int rank, Milliseconds timeout);

}  // namespace dtrain
