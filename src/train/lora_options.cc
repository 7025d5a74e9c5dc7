#include "train/lora_options.h"

#include "common/error.h"
#include "common/options.h"

namespace dtrain {

void declareLoraOptions(OptionSet& set, LoraSpec& o) {
  set.integer("--lora-rank", o.rank,
              "Language models: train low-rank adapters (LoRA) of rank r on the --lora-targets layers, y = x W^T + "
              "(alpha / r) (x A^T) B^T, instead of the model: every other parameter (the adapted weights, "
              "embeddings, norms, head) is frozen, in bf16 under --precision bf16. Checkpoints hold the adapters "
              "and their optimizer state and name the base (--init-from, or the fresh weights of --seed); "
              "`dtrain checkpoint export --merge-lora` folds them into the weights. Not with --tp, --pp or "
              "--shard full")
      .range(1, 1 << 16)
      .defaultMeans("off: the whole model trains");
  set.number("--lora-alpha", o.alpha, "With --lora-rank: the adapters' product is scaled by alpha / r")
      .above(0)
      .atMost(1e6)
      .defaultMeans("--lora-rank (a scale of 1)");
  set.text("--lora-targets", o.targets,
           "With --lora-rank: the layers that get adapters (default q,v). llama: q, k, v, o = attention.wq, wk, wv, "
           "wo; gate, up, down = feed_forward.w1, w3, w2. gpt2: q, k, v = the query, key and value rows of the "
           "fused attn.c_attn; o = attn.c_proj; up, down = mlp.c_fc, mlp.c_proj; no gate")
      .check([](const std::string& text) { return text.empty() ? std::string() : models::loraTargetsProblem(text); },
             models::kLoraTargetsAccepted);
}

models::LoraConfig loraConfigOf(const LoraSpec& spec) {
  models::LoraConfig config;
  if (spec.rank <= 0) return config;
  config.rank = spec.rank;
  config.alpha = spec.alpha > 0 ? spec.alpha : static_cast<double>(spec.rank);
  config.targets = models::parseLoraTargets(spec.targets.empty() ? "q,v" : spec.targets);
  return config;
}

void checkLoraRun(const TrainOptions& options) {
  const LoraSpec& lora = options.model.lora;
  if (lora.rank == 0) {
    if (lora.alpha > 0 || !lora.targets.empty()) {
      throw ConfigError("--lora-alpha and --lora-targets shape LoRA adapters; expected --lora-rank beside them");
    }
    return;
  }
  const std::string flag = "--lora-rank " + std::to_string(lora.rank);
  if (!isLanguageModel(options.model)) {
    throw ConfigError(flag + ": LoRA adapts the linear layers of language models (gpt2, llama); --model " +
                      options.model.name + " is an image model");
  }
  const ParallelOptions& p = options.parallel;
  if (p.tp > 1 || p.pp > 1) {
    throw ConfigError(flag + " with " + (p.tp > 1 ? "--tp " + std::to_string(p.tp) : "--pp " + std::to_string(p.pp)) +
                      ": tensor and pipeline parallelism split the model's layers, not its adapters; LoRA runs "
                      "data-parallel (expected --tp 1 --pp 1)");
  }
  if (p.shard == ShardStage::kFull) {
    throw ConfigError(flag + " with --shard full: ZeRO-3 shards trainable parameters only, so the frozen base "
                      "would stay whole on every rank; use --shard gradients or --shard optimizer");
  }
  models::validateLora(loraConfigOf(lora), languageModelConfig(options.model).family);
}

}  // namespace dtrain
