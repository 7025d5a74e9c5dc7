#include "common/env.h"

#include <cstdlib>

#include "common/error.h"
#include "common/settings.h"

namespace dtrain {

std::optional<std::string> envString(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::optional<int64_t> envInt(const std::string& name, int64_t min, int64_t max) {
  auto text = envString(name);
  if (!text) return std::nullopt;
  int64_t value = parseInt64(*text, name);
  if (value < min || value > max) {
    throw ConfigError(name + "=" + *text + " is out of range; expected " + std::to_string(min) +
                      ".." + std::to_string(max));
  }
  return value;
}

std::string requireEnv(const std::string& name, const std::string& why) {
  auto text = envString(name);
  if (!text || text->empty()) throw ConfigError(name + " is not set; " + why);
  return *text;
}

int64_t requireEnvInt(const std::string& name, int64_t min, int64_t max, const std::string& why) {
  auto value = envInt(name, min, max);
  if (!value) throw ConfigError(name + " is not set; " + why);
  return *value;
}

}  // namespace dtrain
