// Argument checks of the NCCL backend. Each throws ConfigError naming the
// operation and the offending buffer, before anything is enqueued (a rejected
// call takes no sequence number, so the ranks stay in step).
#pragma once

#include <cstddef>
#include <string>

#include "comm/types.h"

namespace dtrain {

// CUDA memory on `device`, non-null unless empty. `role`: "send buffer", ...
void checkNcclBuffer(const Buffer& buffer, int device, const std::string& op, const std::string& role);
void checkSameDType(const Buffer& send, const Buffer& recv, const std::string& op);
// `what` states the rule in words ("recv.count == size() * send.count").
void checkCount(size_t actual, size_t expected, const std::string& op, const std::string& what);
// The stream both buffers name (either may be null); ConfigError if they
// name different streams.
void* commonStream(const Buffer& send, const Buffer& recv, const std::string& op);

}  // namespace dtrain
