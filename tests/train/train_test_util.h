// Helpers shared by the optimizer and AMP tests.
#pragma once

#include <string>

#include "common/error.h"

namespace dtrain {

// The message of the ConfigError that f throws, or "(no ConfigError)".
template <typename F>
std::string configErrorOf(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.message();
  }
  return "(no ConfigError)";
}

}  // namespace dtrain
