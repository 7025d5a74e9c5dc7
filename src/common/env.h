// Reading the launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...).
// Every reader names the variable and the expected form on bad input.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dtrain {

std::optional<std::string> envString(const std::string& name);
// Unset -> nullopt; set but not an integer in [min, max] -> ConfigError.
std::optional<int64_t> envInt(const std::string& name, int64_t min, int64_t max);
// Set or ConfigError("<name> is not set; <why>").
std::string requireEnv(const std::string& name, const std::string& why);
int64_t requireEnvInt(const std::string& name, int64_t min, int64_t max, const std::string& why);

}  // namespace dtrain
