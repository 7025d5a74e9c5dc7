// LanguageModelTask: next-token prediction for the gpt2 and llama families
// over token shards (llm.c's format, --data-dir), the embedded corpus
// (Debian's fortunes, tokenized once into a cache) or synthetic tokens,
// judged by validation loss and perplexity. (private to train/)
//
// A step of a language model is --tokens-per-step tokens over all ranks:
// each rank's batch holds accumulation(world) micro-batches of --batch-size
// sequences of seq_len tokens, and TrainStep accumulates their gradients.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/token_dataset.h"
#include "data/token_source.h"
#include "models/lm_config.h"
#include "models/lora_config.h"
#include "train/task.h"

namespace dtrain {

class LanguageModelTask : public Task {
 public:
  // Resolves the model's shape and opens (or prepares) the data now, so a
  // bad flag, a missing or malformed shard, or a token beyond the
  // vocabulary is a ConfigError naming it before any rank waits on another.
  LanguageModelTask(const DataOptions& data, const ModelSpec& model, uint64_t seed);

  std::string describe() const override;
  std::shared_ptr<models::Model> makeModel() const override;
  std::unique_ptr<BatchSource> trainBatches(int rank, int world_size, torch::Device device) const override;
  // Mean cross-entropy per token over the validation tokens (all of them, or
  // --eval-batches batches per rank); samples are tokens. No validation data:
  // samples 0.
  Evaluation evaluate(models::Model& model, Context& ctx, const DataRanks& ranks, Precision precision) override;
  int64_t tokensPerSample() const override { return config_.seq_len; }

  // Micro-batches per step on `world_size` ranks: --tokens-per-step over
  // (world_size x --batch-size x seq_len), 1 without it. ConfigError when it
  // does not divide.
  int64_t accumulation(int world_size) const;
  const models::LanguageModelConfig& config() const { return config_; }
  // The adapters makeModel adds (--lora-rank; rank 0: none).
  const models::LoraConfig& lora() const { return lora_; }
  // How the text was tokenized: the embedded corpus's tokenizer, on token
  // shards the one the flags name, else the shards' own
  // (data/shard_tokenizer.h); "" when none is known (synthetic tokens,
  // shards of other writers), for checkpoints and `dtrain generate`.
  const std::string& tokenizer() const { return tokenizer_; }
  const std::string& tokenizerPath() const { return tokenizer_path_; }
  // --init-from read once the job is parallelized: makeModel leaves the
  // model as initialized, and loadInitFrom then reads from the memory-mapped
  // files only what this rank holds and logs its share. `shapes`: every
  // trained parameter's whole shape; `fill` fills what this rank holds
  // (ZeRO-3's slices, tensor parallelism's parts) with the ranges it asks
  // the reader it is given for (CheckpointLayout::loadParameters). Not with
  // LoRA (its frozen base lies outside that layout) nor pipelines.
  using RangeReader = std::function<void(const std::string& name, const std::vector<int64_t>& storage_order,
                                         int64_t begin, const torch::Tensor& dst)>;
  void loadInitFromLater() { init_from_later_ = true; }
  void loadInitFrom(const std::map<std::string, std::vector<int64_t>>& shapes,
                    const std::function<void(const RangeReader&)>& fill, int rank) const;

 protected:
  // --dataset chat: the model and its shape as for text, the data left to
  // the chat task (train/chat_modeling.h).
  struct ChatData {};
  LanguageModelTask(const DataOptions& data, const ModelSpec& model, uint64_t seed, ChatData);
  // "llama (2 layers, dim 64, ...)[ with LoRA adapters ...]": describe() without the data.
  std::string modelDescription() const;
  // The batches' options: training (this rank's share, shuffled by the
  // seed, accumulation's micro-batches in one batch) and validation.
  data::TokenDataOptions trainDataOptions(int rank, int world_size, torch::Device device) const;
  data::TokenDataOptions validationDataOptions(const DataRanks& ranks, torch::Device device) const;

 private:
  void openText();
  void nameShardTokenizer();
  void makeSynthetic();

 protected:
  DataOptions options_;
  ModelSpec spec_;
  uint64_t seed_;
  models::LanguageModelConfig config_;
  models::LoraConfig lora_;
  std::shared_ptr<const data::TokenSource> train_, val_;  // val_ may be null
  std::string tokenizer_, tokenizer_path_;
  bool init_from_later_ = false;
};

}  // namespace dtrain
