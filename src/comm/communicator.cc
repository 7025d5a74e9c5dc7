#include "comm/communicator.h"

#include <vector>

#include "common/error.h"

#ifdef DTRAIN_HAVE_GLOO
#include "comm/gloo/communicator.h"
#endif

#ifdef DTRAIN_HAVE_NCCL
#include <dlfcn.h>

#include <mutex>

#include "comm/nccl_settings.h"
#include "common/settings.h"
#endif

namespace dtrain {
namespace {

#ifdef DTRAIN_HAVE_NCCL
DTRAIN_SETTING(bool, kNcclBlocking, "nccl-blocking", "DTRAIN_NCCL_BLOCKING", true,
               "Whether NCCL collectives run on a blocking NCCL communicator, split from the non-blocking one "
               "after its bounded initialisation (NCCL 2.28 or newer); 0 keeps the non-blocking communicator, "
               "where NCCL starts a thread for every call (~50-90 us each, the floor of small all-reduces).");
#endif

#ifdef DTRAIN_HAVE_NCCL
// The NCCL backend's library (comm/nccl/CMakeLists.txt), loaded on first
// use: beside this library (the build tree, an installed tree), else on the
// loader's path. Its entry point makes an NcclCommunicator.
using NcclFactory = Communicator* (*)(std::shared_ptr<Store>*, int, int, const CommunicatorOptions*);
#ifdef DTRAIN_NCCL_LIBRARY_NAME
constexpr const char* kNcclLibrary = DTRAIN_NCCL_LIBRARY_NAME;
#else
constexpr const char* kNcclLibrary = "libdtrain_nccl.so";
#endif

NcclFactory ncclFactory() {
  static std::once_flag once;
  static NcclFactory factory = nullptr;
  static std::string why;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    Dl_info self{};
    if (::dladdr(reinterpret_cast<void*>(&backendAvailable), &self) != 0 && self.dli_fname != nullptr) {
      const std::string path = self.dli_fname;
      const size_t slash = path.rfind('/');
      if (slash != std::string::npos) candidates.push_back(path.substr(0, slash + 1) + kNcclLibrary);
    }
    candidates.push_back(kNcclLibrary);
    for (const std::string& candidate : candidates) {
      void* handle = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (handle == nullptr) {
        why += std::string(why.empty() ? "" : "; ") + ::dlerror();
        continue;
      }
      factory = reinterpret_cast<NcclFactory>(::dlsym(handle, "dtrain_nccl_create_communicator"));
      if (factory != nullptr) return;
      why += "; " + candidate + " has no dtrain_nccl_create_communicator";
    }
  });
  if (factory == nullptr) {
    throw ConfigError("backend 'nccl': its library " + std::string(kNcclLibrary) + " does not load (" + why +
                      "); it needs the CUDA runtime and NCCL (libcudart, libnccl.so.2) on the loader's path; "
                      "install them, or use the gloo backend (--backend gloo)");
  }
  return factory;
}

std::unique_ptr<Communicator> createNcclCommunicator(std::shared_ptr<Store> store, int rank, int size,
                                                     const CommunicatorOptions& options) {
  return std::unique_ptr<Communicator>(ncclFactory()(&store, rank, size, &options));
}
#endif

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

#ifdef DTRAIN_HAVE_NCCL
bool ncclBlockingSetting() { return kNcclBlocking.get(); }
#endif

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
