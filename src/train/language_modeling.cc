#include "train/language_modeling.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "data/embedded_corpus.h"
#include "data/shard_tokenizer.h"
#include "data/token_dataset.h"
#include "data/token_shard_set.h"
#include "data/tokenizer.h"
#include "models/hf_checkpoint.h"
#include "models/language_model.h"
#include "train/lora_options.h"

namespace dtrain {
namespace {

// This rank's batches of windows, as TrainingLoop wants them.
class TokenBatches : public BatchSource {
 public:
  TokenBatches(std::shared_ptr<const data::TokenSource> source, data::TokenDataOptions options)
      : dataset_(std::move(source), options) {}
  int64_t batchesPerEpoch() const override { return dataset_.batchesPerEpoch(); }
  void startEpoch(int64_t epoch, int64_t first_batch) override { dataset_.startEpoch(epoch, first_batch); }
  std::optional<TrainBatch> next() override {
    std::optional<data::TokenBatch> batch = dataset_.next();
    if (!batch) return std::nullopt;
    return TrainBatch{batch->inputs, batch->targets, {}, batch->index, batch->rows};
  }
  std::string describe() const override { return ", " + dataset_.describe(); }

 private:
  data::TokenDataset dataset_;
};

// Whether the directory holds shards of this split (llm.c's *_val_* ones).
bool hasShards(const std::string& dir, const std::string& split) {
  try {
    return !data::findTokenShards(dir, split).empty();
  } catch (const ConfigError&) {
    return false;
  }
}

}  // namespace

LanguageModelTask::LanguageModelTask(const DataOptions& data, const ModelSpec& model, uint64_t seed)
    : options_(data), spec_(model), seed_(seed), config_(languageModelConfig(model)), lora_(loraConfigOf(model.lora)) {
  if (options_.dataset == DatasetKind::kSynthetic) {
    makeSynthetic();
  } else if (options_.dataset == DatasetKind::kText) {
    openText();
  } else {
    throw ConfigError("--model " + spec_.name + " is a language model: it trains on --dataset text or synthetic, "
                      "not '" + datasetName(options_.dataset) + "'");
  }
}

LanguageModelTask::LanguageModelTask(const DataOptions& data, const ModelSpec& model, uint64_t seed, ChatData)
    : options_(data), spec_(model), seed_(seed), config_(languageModelConfig(model)), lora_(loraConfigOf(model.lora)) {}

void LanguageModelTask::openText() {
  // The tokenizer the flags name ("" for none): data::makeTokenizer and the
  // checkpoint's meta take the word.
  tokenizer_ = tokenizerKindName(options_.tokenizer);
  tokenizer_path_ = options_.tokenizer_dir;
  if (tokenizer_.empty() && !tokenizer_path_.empty()) {
    try {
      tokenizer_ = data::tokenizerKindAt(tokenizer_path_);
    } catch (const ConfigError& e) {
      throw ConfigError("--tokenizer-dir without --tokenizer: " + e.message());
    }
  }
  std::string dir = options_.data_dir;
  if (dir.empty()) {
    if (tokenizer_.empty()) tokenizer_ = "byte";
    dir = data::preparedEmbeddedCorpus(tokenizer_, tokenizer_path_, options_.cache_dir);
    // The model's vocabulary is the tokenizer's unless --vocab-size says
    // otherwise (257 byte-level symbols would otherwise sit in a 50257-row
    // GPT-2 embedding), padded to a multiple of 64 for the matmuls.
    if (spec_.lm.vocab_size == 0 && spec_.lm.init_from.empty()) {
      const int64_t vocab = data::makeTokenizer(tokenizer_, tokenizer_path_)->vocabSize();
      config_.vocab_size = (vocab + 63) / 64 * 64;
      models::validateLanguageModel(config_);
    }
  }
  train_ = data::TokenShardSet::open(dir, "train", config_.vocab_size);
  if (!options_.data_dir.empty()) nameShardTokenizer();
  if (!options_.val_data.empty()) {
    val_ = data::TokenShardSet::open(options_.val_data, "", config_.vocab_size);
  } else if (hasShards(dir, "val")) {
    val_ = data::TokenShardSet::open(dir, "val", config_.vocab_size);
  }
}

void LanguageModelTask::nameShardTokenizer() {
  if (tokenizer_.empty()) {
    if (const auto named = data::shardTokenizer(data::findTokenShards(options_.data_dir, "train"))) {
      tokenizer_ = named->kind;
      tokenizer_path_ = named->path;
    }
    return;
  }
  // Named by the flags: it must load, and its ids fit the model.
  const int64_t vocab = data::makeTokenizer(tokenizer_, tokenizer_path_)->vocabSize();
  if (vocab > config_.vocab_size) {
    throw ConfigError("--tokenizer " + tokenizer_ + " has " + std::to_string(vocab) + " ids, more than the model's " +
                      "vocabulary of " + std::to_string(config_.vocab_size) + " (--vocab-size)");
  }
}

void LanguageModelTask::makeSynthetic() {
  const int64_t train_tokens = options_.synthetic_samples * config_.seq_len + 1;
  train_ = std::make_shared<data::InMemoryTokens>(data::syntheticTokens(train_tokens, config_.vocab_size, seed_),
                                                  "synthetic tokens (" + std::to_string(train_tokens) + ")");
  const int64_t val_tokens = std::max<int64_t>(1, options_.synthetic_samples / 4) * config_.seq_len + 1;
  val_ = std::make_shared<data::InMemoryTokens>(data::syntheticTokens(val_tokens, config_.vocab_size, seed_ + 1),
                                                "synthetic tokens (" + std::to_string(val_tokens) + ")");
}

std::string LanguageModelTask::describe() const {
  return modelDescription() + " on " + train_->describe() +
         (val_ ? ", validation " + val_->describe() : ", no validation data");
}

std::string LanguageModelTask::modelDescription() const {
  const std::string name = spec_.lm.init_from.empty()
                               ? spec_.name
                               : std::string(models::lmFamilyName(config_.family)) + " from " + spec_.lm.init_from;
  const std::string lora = !lora_.enabled() ? std::string()
                           : " with LoRA adapters (rank " + std::to_string(lora_.rank) + ", alpha " +
                                 models::loraMetadata(lora_).at("alpha") + ", " + models::loraTargetsText(lora_.targets) +
                                 "; the rest frozen)";
  return name + " (" + std::to_string(config_.layers) + " layers, dim " + std::to_string(config_.dim) +
         ", seq " + std::to_string(config_.seq_len) + ", vocab " + std::to_string(config_.vocab_size) + ")" + lora;
}

std::shared_ptr<models::Model> LanguageModelTask::makeModel() const {
  std::shared_ptr<models::LanguageModel> model = models::createLanguageModel(config_);
  model->setActivationCheckpointing(spec_.lm.activation_checkpointing);
  if (!spec_.lm.init_from.empty() && !init_from_later_) {
    const models::HfLoadReport r = models::loadHfWeights(*model, spec_.lm.init_from);
    const double gib = static_cast<double>(r.bytes) / static_cast<double>(int64_t{1} << 30);
    char rate[96];
    std::snprintf(rate, sizeof(rate), "%.3f GiB in %.2f s (%.2f GiB/s)", gib, r.seconds, gib / std::max(r.seconds, 1e-9));
    DTRAIN_LOG_INFO("--init-from " << spec_.lm.init_from << ": " << r.tensors << " tensors from " << r.files
                                   << " file(s), " << rate);
  }
  // Over the base as loaded: the adapters' A is drawn after the base's own init.
  if (lora_.enabled()) model->addLora(lora_);
  return model;
}

void LanguageModelTask::loadInitFrom(const std::map<std::string, std::vector<int64_t>>& shapes,
                                     const std::function<void(const RangeReader&)>& fill, int rank) const {
  const auto started = std::chrono::steady_clock::now();
  models::HfWeights weights(spec_.lm.init_from, config_, shapes);
  fill([&weights](const std::string& name, const std::vector<int64_t>& order, int64_t begin, const torch::Tensor& dst) {
    weights.read(name, order, begin, dst);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const double gib = static_cast<double>(weights.bytesRead()) / static_cast<double>(int64_t{1} << 30);
  char rate[96];
  std::snprintf(rate, sizeof(rate), "%.3f GiB in %.2f s (%.2f GiB/s)", gib, seconds, gib / std::max(seconds, 1e-9));
  DTRAIN_LOG_INFO("--init-from " << spec_.lm.init_from << ": " << weights.tensorsRead() << " tensors from "
                                 << weights.files() << " file(s), " << rate << "; rank " << rank << "'s share: "
                                 << weights.bytesRead() << " of " << weights.dataBytes() << " bytes");
}

int64_t LanguageModelTask::accumulation(int world_size) const {
  if (options_.tokens_per_step == 0) return 1;
  const int64_t micro = static_cast<int64_t>(world_size) * options_.batch_size * config_.seq_len;
  if (options_.tokens_per_step % micro != 0) {
    throw ConfigError("--tokens-per-step " + std::to_string(options_.tokens_per_step) + " is not a multiple of " +
                      std::to_string(world_size) + " ranks x --batch-size " + std::to_string(options_.batch_size) +
                      " x --seq-len " + std::to_string(config_.seq_len) + " = " + std::to_string(micro) +
                      " tokens per micro-batch");
  }
  return options_.tokens_per_step / micro;
}

data::TokenDataOptions LanguageModelTask::trainDataOptions(int rank, int world_size, torch::Device device) const {
  data::TokenDataOptions o;
  o.seq_len = config_.seq_len;
  o.batch_size = options_.batch_size * accumulation(world_size);
  o.seed = seed_;
  o.rank = rank;
  o.world_size = world_size;
  o.pass = data::TokenPass::kTraining;
  o.device = device;
  return o;
}

data::TokenDataOptions LanguageModelTask::validationDataOptions(const DataRanks& ranks, torch::Device device) const {
  data::TokenDataOptions o;
  o.seq_len = config_.seq_len;
  o.batch_size = options_.batch_size;
  o.rank = ranks.rank;
  o.world_size = ranks.size;
  o.pass = data::TokenPass::kValidation;
  o.device = device;
  return o;
}

std::unique_ptr<BatchSource> LanguageModelTask::trainBatches(int rank, int world_size, torch::Device device) const {
  const data::TokenDataOptions o = trainDataOptions(rank, world_size, device);
  return std::make_unique<TokenBatches>(train_, o);
}

Evaluation LanguageModelTask::evaluate(models::Model& model, Context& ctx, const DataRanks& ranks,
                                      Precision precision) {
  Evaluation result;
  result.correct = -1;
  if (!val_) return result;
  const data::TokenDataOptions o = validationDataOptions(ranks, ctx.device());
  data::TokenDataset dataset(val_, o);
  dataset.startEpoch(0);
  torch::NoGradGuard no_grad;
  model.eval();
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(ctx.device()).dtype(torch::kDouble));
  int64_t tokens = 0, batches = 0;
  while (auto batch = dataset.next()) {
    if (options_.eval_batches > 0 && batches == options_.eval_batches) break;
    torch::Tensor loss;
    {
      AutocastGuard autocast(ctx.device(), precision);
      loss = model.loss(batch->inputs, batch->targets);
    }
    const int64_t n = batch->targets.numel();
    loss_sum += loss.to(torch::kDouble) * static_cast<double>(n);
    tokens += n;
    ++batches;
  }
  model.train();
  std::vector<double> sums{loss_sum.item<double>(), static_cast<double>(tokens)};
  ctx.allreduceSum(sums);
  for (double& sum : sums) sum /= ranks.copies;
  result.samples = static_cast<int64_t>(std::llround(sums[1]));
  result.loss = result.samples > 0 ? sums[0] / sums[1] : 0;
  return result;
}

}  // namespace dtrain
