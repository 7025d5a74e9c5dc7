// The whole model a LoRA run's checkpoint stands for (`dtrain checkpoint
// export --merge-lora`). The checkpoint holds the adapters alone and its
// meta "lora" names the base (train/job_checkpoint.h): the --init-from
// directory, or "" for the fresh weights of the meta's seed, which are drawn
// again as the job drew them (torch::manual_seed(seed), then the model).
//
//   std::shared_ptr<models::LanguageModel> model = mergedLoraModel(reader);
//
// The base is rebuilt, the adapters read in, and every adapted weight set
// to W + (alpha / r) B A (models/lora.h's mergedParameters) in a model
// without adapters (float32), which computes what the adapted one did.
// ConfigError naming the checkpoint when its meta has no "lora" or no
// "model_config", an adapter tensor is missing, or the base directory is
// gone or does not load (models/hf_checkpoint.h's refusals).
#pragma once

#include <memory>

#include "dtrain/checkpoint.h"
#include "models/language_model.h"

namespace dtrain {

// Whether the checkpoint's meta names LoRA adapters.
bool holdsLoraAdapters(const CheckpointReader& reader);

std::shared_ptr<models::LanguageModel> mergedLoraModel(const CheckpointReader& reader);

}  // namespace dtrain
