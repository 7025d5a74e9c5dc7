// Points dtrain's NVML wrapper at a library (the fake one of tests/gpu/)
// for the rest of the test process.
#pragma once

#include <stdlib.h>

#include <string>

#include "common/settings.h"

namespace dtrain::testing {

// DTRAIN_NVML_LIBRARY is a cached setting: set the variable, forget the cache.
inline void useNvmlLibrary(const std::string& path) {
  ::setenv("DTRAIN_NVML_LIBRARY", path.c_str(), 1);
  for (const SettingBase* setting : allSettings()) {
    if (setting->env() == "DTRAIN_NVML_LIBRARY") setting->reset();
  }
}

}  // namespace dtrain::testing
