#include "checkpoint/lora_merge.h"

#include <map>
#include <string>

#include "common/error.h"
#include "common/files.h"
#include "models/hf_checkpoint.h"

namespace dtrain {
namespace {

const std::string kAdapterParam = "model.param.";

std::map<std::string, std::string> metaPairs(const CheckpointReader& reader, const char* key) {
  const nlohmann::json& meta = reader.meta();
  if (!meta.contains(key) || !meta[key].is_object()) {
    throw ConfigError("checkpoint " + reader.path() + " has no meta \"" + key + "\"" +
                      (std::string(key) == "lora" ? "; --merge-lora folds the adapters of a LoRA run "
                                                    "(dtrain train --lora-rank) into its base"
                                                  : "; expected a language model's checkpoint"));
  }
  std::map<std::string, std::string> pairs;
  for (const auto& [name, value] : meta[key].items()) {
    if (!value.is_string()) {
      throw ConfigError("checkpoint " + reader.path() + ": meta \"" + key + "." + name + "\" is not a string");
    }
    pairs[name] = value.get<std::string>();
  }
  return pairs;
}

// The base the adapters were trained over, as the job built it.
std::shared_ptr<models::LanguageModel> loraBaseModel(const CheckpointReader& reader,
                                                     const models::LanguageModelConfig& c,
                                                     const std::string& init_from) {
  const nlohmann::json& meta = reader.meta();
  const uint64_t seed = meta.contains("seed") && meta["seed"].is_number_unsigned() ? meta["seed"].get<uint64_t>() : 0;
  torch::manual_seed(seed);
  std::shared_ptr<models::LanguageModel> model = models::createLanguageModel(c);
  if (init_from.empty()) return model;
  if (!isDirectory(init_from)) {
    throw ConfigError("checkpoint " + reader.path() + ": its LoRA base, the --init-from directory " + init_from +
                      ", is gone; expected the Hugging Face directory the adapters were trained over");
  }
  models::loadHfWeights(*model, init_from);
  return model;
}

}  // namespace

bool holdsLoraAdapters(const CheckpointReader& reader) {
  return reader.meta().is_object() && reader.meta().contains("lora");
}

std::shared_ptr<models::LanguageModel> mergedLoraModel(const CheckpointReader& reader) {
  const std::map<std::string, std::string> lora = metaPairs(reader, "lora");
  const models::LanguageModelConfig c = models::languageModelFromMetadata(metaPairs(reader, "model_config"));
  const auto init_from = lora.find("init_from");
  std::shared_ptr<models::LanguageModel> adapted =
      loraBaseModel(reader, c, init_from == lora.end() ? std::string() : init_from->second);
  adapted->addLora(models::loraFromMetadata(lora));
  torch::NoGradGuard no_grad;
  for (auto& item : adapted->named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;  // the base
    if (reader.find(kAdapterParam + item.key()) == nullptr) {
      throw ConfigError("checkpoint " + reader.path() + " has no adapter '" + kAdapterParam + item.key() +
                        "' of the LoRA config its meta names");
    }
    item.value().copy_(reader.readTensor(kAdapterParam + item.key()));
  }
  std::shared_ptr<models::LanguageModel> merged = models::createLanguageModel(c);
  std::map<std::string, torch::Tensor> values;
  for (auto& [name, value] : models::mergedParameters(*adapted, adapted->lora())) values[name] = value;
  for (auto& item : merged->named_parameters(/*recurse=*/true)) item.value().copy_(values.at(item.key()));
  return merged;
}

}  // namespace dtrain
