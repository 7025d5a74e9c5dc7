#include "models/lora_config.h"

#include <algorithm>
#include <cstdio>

#include "common/error.h"
#include "common/settings.h"

namespace dtrain::models {
namespace {

struct LoraTargetRow {
  LoraTarget target;
  const char* word;
  const char* llama;
  const char* gpt2;  // "" when GPT-2 has none
};

// The table of lora_config.h.
const LoraTargetRow kLoraTargetRows[] = {
    {LoraTarget::kQ, "q", "attention.wq", "attn.c_attn (query rows)"},
    {LoraTarget::kK, "k", "attention.wk", "attn.c_attn (key rows)"},
    {LoraTarget::kV, "v", "attention.wv", "attn.c_attn (value rows)"},
    {LoraTarget::kO, "o", "attention.wo", "attn.c_proj"},
    {LoraTarget::kGate, "gate", "feed_forward.w1", ""},
    {LoraTarget::kUp, "up", "feed_forward.w3", "mlp.c_fc"},
    {LoraTarget::kDown, "down", "feed_forward.w2", "mlp.c_proj"},
};

const LoraTargetRow& targetRowOf(LoraTarget target) {
  for (const LoraTargetRow& row : kLoraTargetRows) {
    if (row.target == target) return row;
  }
  return kLoraTargetRows[0];
}

std::string allTargetWords() {
  std::string words;
  for (const LoraTargetRow& row : kLoraTargetRows) words += (words.empty() ? "" : ", ") + std::string(row.word);
  return words;
}

// The words `family` has, "q, k, v, o, up, down".
std::string targetWordsOf(LmFamily family) {
  std::string words;
  for (const LoraTargetRow& row : kLoraTargetRows) {
    if (!loraTargetLayer(family, row.target).empty()) words += (words.empty() ? "" : ", ") + std::string(row.word);
  }
  return words;
}

std::string loraNumberText(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

const std::string& loraKey(const std::map<std::string, std::string>& metadata, const std::string& key) {
  const auto it = metadata.find(key);
  if (it == metadata.end()) throw ConfigError("LoRA metadata has no '" + key + "'; expected rank, alpha and targets");
  return it->second;
}

}  // namespace

const std::vector<LoraTarget>& allLoraTargets() {
  static const std::vector<LoraTarget> targets = [] {
    std::vector<LoraTarget> all;
    for (const LoraTargetRow& row : kLoraTargetRows) all.push_back(row.target);
    return all;
  }();
  return targets;
}

const char* loraTargetName(LoraTarget target) { return targetRowOf(target).word; }

std::string loraTargetLayer(LmFamily family, LoraTarget target) {
  const LoraTargetRow& row = targetRowOf(target);
  return family == LmFamily::kLlama ? row.llama : row.gpt2;
}

std::string loraTargetsProblem(const std::string& text) {
  std::vector<std::string> seen;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    const std::string word = text.substr(begin, comma - begin);
    const bool known = std::any_of(std::begin(kLoraTargetRows), std::end(kLoraTargetRows),
                                   [&word](const LoraTargetRow& r) { return word == r.word; });
    if (!known) return word.empty() ? "an empty target" : "'" + word + "' is not a target";
    if (std::find(seen.begin(), seen.end(), word) != seen.end()) return "'" + word + "' is named twice";
    seen.push_back(word);
    begin = comma + 1;
  }
  return "";
}

std::vector<LoraTarget> parseLoraTargets(const std::string& text) {
  const std::string problem = loraTargetsProblem(text);
  if (!problem.empty()) {
    throw ConfigError("--lora-targets '" + text + "': " + problem + "; expected " + kLoraTargetsAccepted);
  }
  std::vector<LoraTarget> targets;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    const std::string word = text.substr(begin, comma - begin);
    for (const LoraTargetRow& row : kLoraTargetRows) {
      if (word == row.word) targets.push_back(row.target);
    }
    begin = comma + 1;
  }
  return targets;
}

std::string loraTargetsText(const std::vector<LoraTarget>& targets) {
  std::string text;
  for (LoraTarget t : targets) text += (text.empty() ? "" : ",") + std::string(loraTargetName(t));
  return text;
}

void validateLora(const LoraConfig& config, LmFamily family) {
  if (config.rank <= 0) {
    throw ConfigError("--lora-rank " + std::to_string(config.rank) + ": expected a rank of at least 1");
  }
  if (!(config.alpha > 0)) {
    throw ConfigError("--lora-alpha " + loraNumberText(config.alpha) + ": expected a number above 0");
  }
  if (config.targets.empty()) {
    throw ConfigError("--lora-targets is empty; expected at least one of " + allTargetWords());
  }
  for (LoraTarget t : config.targets) {
    if (loraTargetLayer(family, t).empty()) {
      throw ConfigError("--lora-targets " + loraTargetsText(config.targets) + ": " + lmFamilyName(family) +
                        " has no '" + loraTargetName(t) + "' layer; its targets are " + targetWordsOf(family));
    }
  }
}

int64_t loraParameterCount(const LanguageModelConfig& c, const LoraConfig& config) {
  const int64_t d = c.dim, f = c.ffn_dim, q = c.heads * c.headDim(), kv = c.kvDim();
  const bool llama = c.family == LmFamily::kLlama;
  int64_t per_block = 0;
  for (LoraTarget t : config.targets) {
    switch (t) {  // in + rows of the layer (gpt2's q, k and v: a third of c_attn)
      case LoraTarget::kQ: per_block += d + (llama ? q : d); break;
      case LoraTarget::kK:
      case LoraTarget::kV: per_block += d + (llama ? kv : d); break;
      case LoraTarget::kO: per_block += (llama ? q : d) + d; break;
      case LoraTarget::kGate: per_block += llama ? d + f : 0; break;
      case LoraTarget::kUp: per_block += d + f; break;
      case LoraTarget::kDown: per_block += f + d; break;
    }
  }
  return c.layers * config.rank * per_block;
}

std::map<std::string, std::string> loraMetadata(const LoraConfig& config) {
  return {{"rank", std::to_string(config.rank)},
          {"alpha", loraNumberText(config.alpha)},
          {"targets", loraTargetsText(config.targets)}};
}

LoraConfig loraFromMetadata(const std::map<std::string, std::string>& metadata) {
  LoraConfig config;
  config.rank = parseInt64(loraKey(metadata, "rank"), "LoRA metadata 'rank'");
  config.alpha = parseDouble(loraKey(metadata, "alpha"), "LoRA metadata 'alpha'");
  config.targets = parseLoraTargets(loraKey(metadata, "targets"));
  if (config.rank <= 0 || !(config.alpha > 0)) {
    throw ConfigError("LoRA metadata: rank " + std::to_string(config.rank) + ", alpha " + loraNumberText(config.alpha) +
                      "; expected both above 0");
  }
  return config;
}

}  // namespace dtrain::models
