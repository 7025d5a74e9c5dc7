// LoRA's settings for a language model, torch-free: the CLI checks
// --lora-rank/--lora-alpha/--lora-targets and a checkpoint's meta names
// them without loading libtorch. models/lora.h holds the adapters.
//
// A target is a word for one of a block's linear layers; each family maps
// the words onto its own layers:
//
//   word   llama                  gpt2
//   q      attention.wq           attn.c_attn, its query rows
//   k      attention.wk           attn.c_attn, its key rows
//   v      attention.wv           attn.c_attn, its value rows
//   o      attention.wo           attn.c_proj
//   gate   feed_forward.w1        (none: GPT-2's MLP has no gate)
//   up     feed_forward.w3        mlp.c_fc
//   down   feed_forward.w2        mlp.c_proj
//
// Every error is a ConfigError naming the flag as the CLI spells it
// (--lora-rank, --lora-alpha, --lora-targets) and what was expected.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/lm_config.h"

namespace dtrain::models {

enum class LoraTarget { kQ, kK, kV, kO, kGate, kUp, kDown };

// Every target, in the table's order.
const std::vector<LoraTarget>& allLoraTargets();
// "q" | "k" | "v" | "o" | "gate" | "up" | "down".
const char* loraTargetName(LoraTarget target);

struct LoraConfig {
  int64_t rank = 0;    // r; 0: no adapters
  double alpha = 0;    // the adapters' product is scaled by alpha / r
  std::vector<LoraTarget> targets;

  bool enabled() const { return rank > 0; }
  double scale() const { return alpha / static_cast<double>(rank); }
};

// The layer `target` adapts in `family` as the table says ("attention.wq",
// "attn.c_attn (query rows)"); "" when the family has none.
std::string loraTargetLayer(LmFamily family, LoraTarget target);

// What --lora-targets accepts, for messages and --help.
inline constexpr const char* kLoraTargetsAccepted = "a comma-separated list of q, k, v, o, gate, up, down";
// Why `text` is no list of targets ("'x' is not a target", "'q' is named
// twice", "an empty target"); "" when it is one.
std::string loraTargetsProblem(const std::string& text);
// "q,k,v" -> the targets, in the order given. ConfigError naming
// --lora-targets and the problem otherwise.
std::vector<LoraTarget> parseLoraTargets(const std::string& text);
// The inverse: "q,k,v".
std::string loraTargetsText(const std::vector<LoraTarget>& targets);

// ConfigError unless rank > 0 (--lora-rank), alpha > 0 (--lora-alpha) and
// every target is a layer of `family` (--lora-targets, naming the target
// and the words the family has).
void validateLora(const LoraConfig& config, LmFamily family);

// The adapters' parameters in a model of `model`'s shape: r x (in + rows)
// per adapted layer and block.
int64_t loraParameterCount(const LanguageModelConfig& model, const LoraConfig& config);

// The config as string pairs (rank, alpha, targets) for a checkpoint's
// meta, and back; the reverse names a missing or malformed key.
std::map<std::string, std::string> loraMetadata(const LoraConfig& config);
LoraConfig loraFromMetadata(const std::map<std::string, std::string>& metadata);

}  // namespace dtrain::models
