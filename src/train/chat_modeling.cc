#include "train/chat_modeling.h"

#include <cmath>
#include <cstdio>

#include "common/error.h"
#include "common/log.h"
#include "data/chat_dataset.h"
#include "data/tokenizer.h"
#include "models/language_model.h"

namespace dtrain {
namespace {

// This rank's batches of packed rows, as TrainingLoop wants them.
class ChatBatches : public BatchSource {
 public:
  ChatBatches(std::shared_ptr<const data::ChatPacking> rows, data::TokenDataOptions options)
      : dataset_(std::move(rows), options) {}
  int64_t batchesPerEpoch() const override { return dataset_.batchesPerEpoch(); }
  void startEpoch(int64_t epoch, int64_t first_batch) override { dataset_.startEpoch(epoch, first_batch); }
  std::optional<TrainBatch> next() override {
    std::optional<data::ChatBatch> batch = dataset_.next();
    if (!batch) return std::nullopt;
    return TrainBatch{batch->inputs, batch->targets, batch->positions, batch->index, batch->rows};
  }
  std::string describe() const override { return ", " + dataset_.describe(); }

 private:
  data::ChatDataset dataset_;
};

std::string packingText(const data::ChatPacking& p) {
  const double fill = p.rowCount() > 0 ? 100.0 * static_cast<double>(p.tokens()) /
                                             static_cast<double>(p.rowCount() * p.seq_len)
                                       : 0;
  char percent[32];
  std::snprintf(percent, sizeof(percent), "%.1f%%", fill);
  return std::to_string(p.samples.size()) + " conversations in " + std::to_string(p.rowCount()) + " rows (" +
         percent + " filled, " + std::to_string(p.trainedTokens()) + " trained tokens)";
}

}  // namespace

std::string badRecordsMessage(const std::vector<data::BadRecord>& bad, int64_t allowed, size_t shown) {
  std::string text = "--dataset chat: " + std::to_string(bad.size()) + " bad record(s), more than --max-bad-records " +
                     std::to_string(allowed) + ":";
  for (size_t i = 0; i < bad.size() && i < shown; ++i) text += "\n  " + bad[i].where() + ": " + bad[i].reason;
  if (bad.size() > shown) text += "\n  ... and " + std::to_string(bad.size() - shown) + " more";
  return text;
}

ChatTask::ChatTask(const DataOptions& data, const ModelSpec& model, uint64_t seed)
    : LanguageModelTask(data, model, seed, ChatData{}) {
  openTokenizer();
  const data::ChatRecords all = data::readChatRecords(data::chatDataFiles(options_.data_dir, "--data-dir"));
  bad_ = all.bad;
  std::vector<data::ChatRecord> train, val;
  if (!options_.val_data.empty()) {
    train = all.records;
    const data::ChatRecords held = data::readChatRecords(data::chatDataFiles(options_.val_data, "--val-data"));
    bad_.insert(bad_.end(), held.bad.begin(), held.bad.end());
    val = held.records;
  } else {
    for (const data::ChatRecord& r : all.records) (data::heldOut(r, options_.val_fraction) ? val : train).push_back(r);
  }
  std::vector<data::ChatSample> train_samples = samplesOf(train);
  std::vector<data::ChatSample> val_samples = samplesOf(val);
  checkBadRecords();
  const uint32_t pad = text_tokenizer_->eotToken();
  const int64_t seq = config_.seq_len;
  train_rows_ = std::make_shared<data::ChatPacking>(data::packChatSamples(std::move(train_samples), seq, pad));
  if (!val_samples.empty()) {
    val_rows_ = std::make_shared<data::ChatPacking>(data::packChatSamples(std::move(val_samples), seq, pad));
  }
  if (train_rows_->rowCount() == 0) {
    throw ConfigError("--dataset chat: no conversations to train on in --data-dir " + options_.data_dir);
  }
}

void ChatTask::openTokenizer() {
  tokenizer_path_ = !options_.tokenizer_dir.empty() ? options_.tokenizer_dir : spec_.lm.init_from;
  tokenizer_ = tokenizerKindName(options_.tokenizer);
  if (tokenizer_.empty()) {
    try {
      tokenizer_ = data::tokenizerKindAt(tokenizer_path_);
    } catch (const ConfigError& e) {
      throw ConfigError("--dataset chat: the tokenizer (--tokenizer-dir, else --init-from): " + e.message());
    }
  }
  text_tokenizer_ = data::makeTokenizer(tokenizer_, tokenizer_path_);
  format_ = data::resolveChatTemplate(options_.chat_template, tokenizer_path_, *text_tokenizer_);
  const int64_t vocab = text_tokenizer_->vocabSize();
  if (spec_.lm.vocab_size == 0 && spec_.lm.init_from.empty()) {
    config_.vocab_size = (vocab + 63) / 64 * 64;  // the tokenizer's, padded for the matmuls
    models::validateLanguageModel(config_);
  } else if (vocab > config_.vocab_size) {
    throw ConfigError("--dataset chat: the tokenizer in " + tokenizer_path_ + " has " + std::to_string(vocab) +
                      " ids, more than the model's vocabulary of " + std::to_string(config_.vocab_size));
  }
}

std::vector<data::ChatSample> ChatTask::samplesOf(const std::vector<data::ChatRecord>& records) {
  std::vector<data::ChatSample> samples;
  samples.reserve(records.size());
  for (const data::ChatRecord& r : records) {
    data::ChatSample sample = data::tokenizeChat(*text_tokenizer_, format_, r.messages);
    const auto n = static_cast<int64_t>(sample.tokens.size());
    if (n > config_.seq_len) {
      bad_.push_back(data::BadRecord{r.file, r.line,
                                     std::to_string(n) + " tokens, longer than --seq-len " +
                                         std::to_string(config_.seq_len)});
      continue;
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

void ChatTask::checkBadRecords() const {
  if (bad_.empty()) return;
  if (static_cast<int64_t>(bad_.size()) > options_.max_bad_records) {
    throw ConfigError(badRecordsMessage(bad_, options_.max_bad_records));
  }
  DTRAIN_LOG_WARN("--dataset chat: skipping " << bad_.size() << " bad record(s) (--max-bad-records "
                                              << options_.max_bad_records << "), the first at " << bad_[0].where()
                                              << ": " << bad_[0].reason);
}

std::string ChatTask::describe() const {
  return modelDescription() + " on " + packingText(*train_rows_) + " of " + options_.data_dir + " (" +
         data::chatTemplateName(format_) + " template), " +
         (val_rows_ ? "validation " + packingText(*val_rows_) : "no validation data");
}

std::unique_ptr<BatchSource> ChatTask::trainBatches(int rank, int world_size, torch::Device device) const {
  const data::TokenDataOptions o = trainDataOptions(rank, world_size, device);
  return std::make_unique<ChatBatches>(train_rows_, o);
}

Evaluation ChatTask::evaluate(models::Model& model, Context& ctx, const DataRanks& ranks, Precision precision) {
  Evaluation result;
  result.correct = -1;
  if (!val_rows_) return result;
  const data::TokenDataOptions o = validationDataOptions(ranks, ctx.device());
  data::ChatDataset dataset(val_rows_, o);
  dataset.startEpoch(0);
  torch::NoGradGuard no_grad;
  model.eval();
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().device(ctx.device()).dtype(torch::kDouble));
  int64_t trained = 0, batches = 0;
  while (auto batch = dataset.next()) {
    if (options_.eval_batches > 0 && batches == options_.eval_batches) break;
    ++batches;
    if (batch->trained == 0) continue;
    torch::Tensor loss;
    {
      AutocastGuard autocast(ctx.device(), precision);
      loss = batch->positions.defined() ? model.packedLoss(batch->inputs, batch->targets, batch->positions)
                                        : model.loss(batch->inputs, batch->targets);
    }
    loss_sum += loss.to(torch::kDouble) * static_cast<double>(batch->trained);
    trained += batch->trained;
  }
  model.train();
  std::vector<double> sums{loss_sum.item<double>(), static_cast<double>(trained)};
  ctx.allreduceSum(sums);
  for (double& sum : sums) sum /= ranks.copies;
  result.samples = static_cast<int64_t>(std::llround(sums[1]));
  result.loss = result.samples > 0 ? sums[0] / sums[1] : 0;
  return result;
}

}  // namespace dtrain
