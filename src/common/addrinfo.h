// getaddrinfo's result list, owned (freed with freeaddrinfo). Private to
// common/'s socket seam (socket.cc, address.cc).
#pragma once

#include <netdb.h>

#include <memory>

namespace dtrain {

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { freeaddrinfo(info); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

}  // namespace dtrain
