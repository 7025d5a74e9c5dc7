#include "cli/training_runtime.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <vector>

#include "common/error.h"

namespace dtrain::cli {

void* trainingRuntimeSymbol(const std::string& name) {
  std::vector<std::string> candidates = {DTRAIN_TRAIN_LIBRARY};
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    const std::filesystem::path dir = std::filesystem::path(std::string(self, static_cast<size_t>(n))).parent_path();
    candidates.push_back((dir / DTRAIN_TRAIN_LIBRARY_NAME).string());
    candidates.push_back((dir.parent_path() / "lib" / DTRAIN_TRAIN_LIBRARY_NAME).string());
  }
  candidates.push_back(DTRAIN_TRAIN_LIBRARY_NAME);
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
  throw IoError(std::string("cannot load the training runtime ") + DTRAIN_TRAIN_LIBRARY_NAME +
                " (libtorch and its dependencies must be installed):" + (errors.empty() ? " not found" : errors));
}

}  // namespace dtrain::cli
