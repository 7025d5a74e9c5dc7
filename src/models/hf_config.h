// A Hugging Face model directory's config.json as a LanguageModelConfig
// (torch-free: the CLI checks --init-from without loading libtorch).
// models/hf_checkpoint.h says which fields map to what and what is refused.
#pragma once

#include <string>

#include "models/lm_config.h"

namespace dtrain::models {

// ConfigError naming the field, its value and what dtrain expects.
LanguageModelConfig readHfConfig(const std::string& dir);

}  // namespace dtrain::models
