#include "cli/training_runtime.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <vector>

#include "common/host.h"
#include "common/error.h"
#include "common/heap.h"

namespace dtrain::cli {

void* trainingRuntimeSymbol(const std::string& name) {
  // The process is about to run libtorch: freed tensors stay in the heap (common/heap.h).
  static const bool tuned [[maybe_unused]] = keepFreedHeapForReuse();
  // An installed binary loads its own tree's runtime first; a build tree's binary the one built beside it.
  std::vector<std::string> candidates;
  try {
    const std::filesystem::path dir = std::filesystem::path(selfExecutablePath()).parent_path();
    candidates.push_back((dir / DTRAIN_RUNTIME_LIBRARY_NAME).string());
    // An installed tree: <prefix>/bin/dtrain and <prefix>/<libdir>/.
    candidates.push_back((dir.parent_path() / DTRAIN_INSTALL_LIBDIR / DTRAIN_RUNTIME_LIBRARY_NAME).string());
    candidates.push_back((dir.parent_path() / "lib" / DTRAIN_RUNTIME_LIBRARY_NAME).string());
  } catch (const IoError&) {
    // Without its own path the binary still finds the runtime where the build put it or on the loader's path.
  }
  candidates.push_back(DTRAIN_RUNTIME_LIBRARY);
  candidates.push_back(DTRAIN_RUNTIME_LIBRARY_NAME);
  std::string errors;
  for (const std::string& path : candidates) {
    if (path.find('/') != std::string::npos && !std::filesystem::exists(path)) continue;
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      errors += std::string("\n  ") + ::dlerror();
      continue;
    }
    if (void* fn = ::dlsym(handle, name.c_str())) return fn;
    errors += "\n  " + path + ": no " + name;
  }
  throw IoError(std::string("cannot load the training runtime ") + DTRAIN_RUNTIME_LIBRARY_NAME +
                " (libtorch and its dependencies must be installed):" + (errors.empty() ? " not found" : errors));
}

}  // namespace dtrain::cli
