#include "models/language_model.h"

#include "common/error.h"
#include "models/activation_checkpoint.h"
#include "models/gpt2.h"
#include "models/llama.h"
#include "models/lm_counts.h"

namespace dtrain::models {
namespace {

std::string shapeText(const torch::Tensor& t) {
  std::string text = "[";
  for (int64_t i = 0; i < t.dim(); ++i) text += (i ? ", " : "") + std::to_string(t.size(i));
  return text + "]";
}

}  // namespace

torch::Tensor blockLinear(const BlockSeams& seams, const torch::Tensor& x, const torch::Tensor& weight,
                          const torch::Tensor& bias) {
  const torch::Tensor out = ops::linear(x, weight, bias);
  if (!seams.lora.adapts(weight)) return out;
  return out + seams.lora.delta(x, weight);
}

std::vector<torch::Tensor> blockLinears(const BlockSeams& seams, const torch::Tensor& x,
                                        const std::vector<torch::Tensor>& weights) {
  bool adapted = false;
  for (const torch::Tensor& w : weights) adapted = adapted || seams.lora.adapts(w);
  if (!adapted) return ops::sharedInputLinears(x, weights);
  std::vector<torch::Tensor> outs;
  for (const torch::Tensor& w : weights) outs.push_back(blockLinear(seams, x, w, {}));
  return outs;
}

torch::Tensor rowSplitLinear(const BlockSeams& seams, const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias) {
  if (seams.split == nullptr) return blockLinear(seams, x, weight, bias);
  const torch::Tensor out = seams.split->rowLinear(x, weight);
  return bias.defined() ? out + bias : out;
}

torch::Tensor TransformerBlock::forwardCached(const torch::Tensor&, KvSlot) {
  throw ConfigError("this transformer block has no cached decoding (forwardCached)");
}

LanguageModel::LanguageModel(LanguageModelConfig config) : config_(std::move(config)) {
  validateLanguageModel(config_);
  // Model reports training FLOPs as three forwards.
  forward_flops_ = static_cast<double>(config_.seq_len) * trainingFlopsPerToken(config_.seq_len) / 3;
}

double LanguageModel::trainingFlopsPerToken(int64_t seq_len) const {
  return models::trainingFlopsPerToken(config_, seq_len);
}

std::vector<torch::Tensor> LanguageModel::noWeightDecayParameters() {
  std::vector<torch::Tensor> exempt = embeddingParameters();
  for (const torch::Tensor& p : parameters()) {
    if (p.dim() < 2) exempt.push_back(p);
  }
  return exempt;
}

void LanguageModel::checkTokens(const torch::Tensor& tokens) const {
  if (tokens.dim() != 2 || tokens.scalar_type() != torch::kLong) {
    throw ConfigError("language model '" + config_.name + "': input tokens must be int64 [batch, seq], got " +
                      std::string(c10::toString(tokens.scalar_type())) + " " + shapeText(tokens));
  }
}

ResidualStream LanguageModel::embedStream(const torch::Tensor& tokens) {
  checkTokens(tokens);
  if (tokens.size(1) > config_.max_seq_len) {
    throw ConfigError("language model '" + config_.name + "': input has " + std::to_string(tokens.size(1)) +
                      " tokens per sequence, more than its " + std::to_string(config_.max_seq_len) + " positions");
  }
  if (UnitHooks* hooks = unitHooks()) hooks->beforeForward(0);
  return ResidualStream{embed(tokens), {}};
}

ResidualStream LanguageModel::forwardBlocks(ResidualStream stream, int64_t first, int64_t end) {
  if (first < 0 || first > end || end > static_cast<int64_t>(blocks_.size())) {
    throw ConfigError("language model '" + config_.name + "': blocks " + std::to_string(first) + ".." +
                      std::to_string(end) + " are not a range of its " + std::to_string(blocks_.size()) + " blocks");
  }
  UnitHooks* hooks = unitHooks();
  for (int64_t b = first; b < end; ++b) {
    const int unit = static_cast<int>(b) + 1;
    if (hooks != nullptr) hooks->beforeForward(unit);
    if (activation_checkpointing_ && torch::GradMode::is_enabled()) {
      std::shared_ptr<TransformerBlock> block = blocks_[b];
      const std::vector<torch::Tensor> out = checkpointed(
          [block](const std::vector<torch::Tensor>& in) {
            const ResidualStream next = block->forwardStream(ResidualStream{in[0], in[1]});
            return std::vector<torch::Tensor>{next.residual, next.pending};
          },
          {stream.residual, stream.pending});
      stream = {out[0], out[1]};
    } else {
      stream = blocks_[b]->forwardStream(stream);
    }
    if (hooks != nullptr) {
      std::vector<torch::Tensor> out = hooks->afterForward(unit, {stream.residual, stream.pending});
      stream = {out.at(0), out.at(1)};
    }
  }
  return stream;
}

torch::Tensor LanguageModel::lossOf(const ResidualStream& stream, const torch::Tensor& targets) {
  const torch::Tensor h = finalNormOf(stream);
  TensorSplit* split = tensorSplit();
  torch::Tensor loss = split != nullptr ? split->classifierCrossEntropy(h, outputWeight(), targets)
                                        : ops::classifierCrossEntropy(h, outputWeight(), targets);
  if (UnitHooks* hooks = unitHooks()) loss = hooks->afterForward(0, {loss}).at(0);
  return loss;
}

torch::Tensor LanguageModel::hidden(const torch::Tensor& tokens) {
  return finalNormOf(forwardBlocks(embedStream(tokens), 0, static_cast<int64_t>(blocks_.size())));
}

void LanguageModel::addLora(const LoraConfig& config) {
  validateLora(config, config_.family);
  if (!seams_->lora.empty()) throw ConfigError("language model '" + config_.name + "' has LoRA adapters already");
  if (seams_->split != nullptr) {
    throw ConfigError("language model '" + config_.name + "': LoRA adapters go on a whole model, not on one "
                      "split over tensor-parallel ranks");
  }
  for (torch::Tensor& p : parameters()) p.requires_grad_(false);
  for (int64_t b = 0; b < static_cast<int64_t>(blocks_.size()); ++b) {
    for (LoraTarget target : config.targets) {
      const std::optional<LoraSite> site = loraSite(b, target);
      if (!site) {
        throw ConfigError(std::string("--lora-targets: ") + lmFamilyName(config_.family) + " has no '" +
                          loraTargetName(target) + "' layer");
      }
      seams_->lora.add(*site, config);
    }
  }
}

std::vector<std::vector<torch::Tensor>> LanguageModel::shardingUnits() {
  std::vector<std::vector<torch::Tensor>> units;
  units.push_back(embeddingParameters());
  for (const torch::Tensor& p : headParameters()) units.front().push_back(p);
  for (const auto& block : blocks_) units.push_back(block->parameters());
  return units;
}

torch::Tensor LanguageModel::forward(torch::Tensor tokens) {
  seams_->documents = {};
  if (TensorSplit* split = tensorSplit()) return split->classifier(hidden(tokens), outputWeight());
  return ops::classifier(hidden(tokens), outputWeight());
}

torch::Tensor LanguageModel::forwardCached(const torch::Tensor& tokens, KvCache& cache) {
  checkTokens(tokens);
  const int64_t t = tokens.size(1), end = cache.length() + t;
  if (tokens.size(0) != cache.batch() || cache.blocks() != static_cast<int64_t>(blocks_.size())) {
    throw ConfigError("language model '" + config_.name + "': a KV cache of batch " + std::to_string(cache.batch()) +
                      " and " + std::to_string(cache.blocks()) + " blocks cannot serve tokens " + shapeText(tokens) +
                      " of a model with " + std::to_string(blocks_.size()) + " blocks");
  }
  if (end > cache.capacity() || end > config_.max_seq_len) {
    throw ConfigError("language model '" + config_.name + "': positions up to " + std::to_string(end) +
                      " exceed the KV cache's capacity of " + std::to_string(cache.capacity()) +
                      " or the model's " + std::to_string(config_.max_seq_len) + " positions");
  }
  if (tensorSplit() != nullptr) {
    throw ConfigError("language model '" + config_.name + "': cached decoding runs on a whole model; consolidate the "
                      "tensor-parallel checkpoint (dtrain checkpoint consolidate) and generate from it");
  }
  torch::NoGradGuard no_grad;
  torch::Tensor x = embedAt(tokens, cache.length());
  for (size_t b = 0; b < blocks_.size(); ++b) x = blocks_[b]->forwardCached(x, cache.slot(static_cast<int64_t>(b)));
  cache.advance(t);
  return ops::classifier(finalNorm(x), outputWeight());
}

void LanguageModel::checkTargets(const torch::Tensor& tokens, const torch::Tensor& targets) const {
  if (!targets.sizes().equals(tokens.sizes()) || targets.scalar_type() != torch::kLong) {
    throw ConfigError("language model '" + config_.name + "': targets must be int64 of the tokens' shape " +
                      shapeText(tokens) + ", got " + std::string(c10::toString(targets.scalar_type())) + " " +
                      shapeText(targets));
  }
}

torch::Tensor LanguageModel::loss(const torch::Tensor& tokens, const torch::Tensor& targets) {
  checkTargets(tokens, targets);
  seams_->documents = {};
  return lossOf(forwardBlocks(embedStream(tokens), 0, static_cast<int64_t>(blocks_.size())), targets);
}

void LanguageModel::setDocuments(const torch::Tensor& tokens, const torch::Tensor& positions) {
  checkTokens(tokens);
  if (!positions.defined()) {
    seams_->documents = {};
    return;
  }
  if (!positions.sizes().equals(tokens.sizes())) {
    throw ConfigError("language model '" + config_.name + "': packed samples' positions must have the tokens' " +
                      "shape " + shapeText(tokens) + ", got " + shapeText(positions));
  }
  if (tensorSplit() != nullptr) {
    throw ConfigError("language model '" + config_.name + "': packed samples run on a whole model, not on one "
                      "split over tensor-parallel ranks");
  }
  seams_->documents = ops::packedDocuments(positions);
}

torch::Tensor LanguageModel::packedLoss(const torch::Tensor& tokens, const torch::Tensor& targets,
                                        const torch::Tensor& positions) {
  checkTargets(tokens, targets);
  setDocuments(tokens, positions);
  return lossOf(forwardBlocks(embedStream(tokens), 0, static_cast<int64_t>(blocks_.size())), targets);
}

torch::Tensor LanguageModel::forwardPacked(const torch::Tensor& tokens, const torch::Tensor& positions) {
  setDocuments(tokens, positions);
  return ops::classifier(hidden(tokens), outputWeight());
}

std::shared_ptr<LanguageModel> createLanguageModel(const LanguageModelConfig& config) {
  validateLanguageModel(config);
  if (config.family == LmFamily::kGpt2) return std::make_shared<Gpt2>(config);
  return std::make_shared<Llama>(config);
}

}  // namespace dtrain::models
