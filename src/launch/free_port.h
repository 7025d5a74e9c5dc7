// A TCP port the kernel reports free right now. The socket is closed before
// the caller's user binds the port, so another process could take it in
// between; each caller says how it copes (a fresh --standalone port per run;
// MASTER_PORT retried on collision by the agent).
#pragma once

#include <cstdint>
#include <string>

namespace dtrain {

// `loopback_only`: bind 127.0.0.1 rather than every address. `purpose` names
// the port in the IoError raised when none can be had.
uint16_t freeTcpPort(bool loopback_only, const std::string& purpose);

}  // namespace dtrain
