// A Hugging Face model directory's config.json as a LanguageModelConfig
// (torch-free: the CLI checks --init-from without loading libtorch).
// models/hf_checkpoint.h says which fields map to what and what is refused.
#pragma once

#include <string>
#include <vector>

#include "models/lm_config.h"

namespace dtrain::models {

// ConfigError naming the field, its value and what dtrain expects.
LanguageModelConfig readHfConfig(const std::string& dir);

// The directory's weight files: model.safetensors, or the shards that
// model.safetensors.index.json's weight_map names (ConfigError when
// neither is there or the index is malformed).
std::vector<std::string> hfWeightFiles(const std::string& dir);

}  // namespace dtrain::models
