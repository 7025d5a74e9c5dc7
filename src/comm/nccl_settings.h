// The NCCL backend's settings, registered by dtrain_comm itself so that
// `dtrain settings` lists them and a bad value is refused at start-up even
// though the backend's library (libdtrain_nccl.so) loads only when used.
// (private to comm/)
#pragma once

namespace dtrain {

// DTRAIN_NCCL_BLOCKING (default true).
bool ncclBlockingSetting();

}  // namespace dtrain
