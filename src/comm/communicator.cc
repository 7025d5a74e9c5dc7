#include "comm/communicator.h"

#include <vector>

#include "common/error.h"

#ifdef DTRAIN_HAVE_GLOO
#include "comm/gloo/communicator.h"
#endif

#ifdef DTRAIN_HAVE_NCCL
#if __has_include("comm/nccl/communicator.h")
#include "comm/nccl/communicator.h"
#else
namespace dtrain {
// Defined by the NCCL backend (src/comm/nccl/communicator.cc).
std::unique_ptr<Communicator> createNcclCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                                     const CommunicatorOptions& options);
}  // namespace dtrain
#endif
#endif

namespace dtrain {
namespace {

const std::vector<std::string>& builtBackends() {
  static const std::vector<std::string> names = {
#ifdef DTRAIN_HAVE_GLOO
      "gloo",
#endif
#ifdef DTRAIN_HAVE_NCCL
      "nccl",
#endif
  };
  return names;
}

std::string builtBackendList() {
  std::string list;
  for (const auto& name : builtBackends()) list += (list.empty() ? "" : ", ") + name;
  return list.empty() ? "none" : list;
}

}  // namespace

bool backendAvailable(const std::string& backend) {
  for (const auto& name : builtBackends()) {
    if (name == backend) return true;
  }
  return false;
}

std::unique_ptr<Communicator> createCommunicator(const std::string& backend,
                                                 std::shared_ptr<Store> store, int rank, int size,
                                                 const CommunicatorOptions& options) {
#ifdef DTRAIN_HAVE_GLOO
  if (backend == "gloo") return createGlooCommunicator(std::move(store), rank, size, options);
#endif
#ifdef DTRAIN_HAVE_NCCL
  if (backend == "nccl") return createNcclCommunicator(std::move(store), rank, size, options);
#endif
  if (backend == "gloo" || backend == "nccl") {
    throw ConfigError("backend '" + backend + "' was not built into this dtrain; built backends: " +
                      builtBackendList());
  }
  throw ConfigError("unknown backend '" + backend + "'; expected one of the built backends: " +
                    builtBackendList());
}

}  // namespace dtrain
