// ChatTask: supervised fine-tuning of a language model on conversations
// (--dataset chat; docs/chat-data.md). (private to train/)
//
// The records of --data-dir's JSONL files (data/chat_records.h) are
// rendered by the chat template (--chat-template, data/chat_template.h),
// tokenized with the run's tokenizer (--tokenizer-dir, else --init-from's
// directory), and packed into rows of --seq-len (data/chat_samples.h); the
// loss is on the assistants' tokens alone, each sample attends only to
// itself and its positions start at 0 (models::Model::packedLoss). A
// --val-fraction of the records (or --val-data's) is held out, packed the
// same way, and evaluated per trained token.
//
// Bad records (data/chat_records.h's, and samples longer than --seq-len)
// are counted with their file and line: more than --max-bad-records is a
// ConfigError naming the first ones (dtrain train exits 2); up to it, one
// warning line with the count.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/chat_records.h"
#include "data/chat_samples.h"
#include "data/tokenizer.h"
#include "train/language_modeling.h"

namespace dtrain {

class ChatTask : public LanguageModelTask {
 public:
  // Reads, checks, tokenizes and packs every record now (ConfigError as
  // the header says, and for the tokenizer and template as
  // data::resolveChatTemplate says).
  ChatTask(const DataOptions& data, const ModelSpec& model, uint64_t seed);

  std::string describe() const override;
  std::unique_ptr<BatchSource> trainBatches(int rank, int world_size, torch::Device device) const override;
  // Mean cross-entropy per trained token of the held-out rows (all, or
  // --eval-batches per rank); samples are trained tokens.
  Evaluation evaluate(models::Model& model, Context& ctx, const DataRanks& ranks, Precision precision) override;

  data::ChatTemplate chatTemplate() const { return format_; }
  const std::vector<data::BadRecord>& badRecords() const { return bad_; }

 private:
  void openTokenizer();
  // The records' samples; bad ones (and those longer than --seq-len) go to bad_.
  std::vector<data::ChatSample> samplesOf(const std::vector<data::ChatRecord>& records);
  void checkBadRecords() const;

  std::unique_ptr<data::Tokenizer> text_tokenizer_;
  data::ChatTemplate format_ = data::ChatTemplate::kAuto;
  std::vector<data::BadRecord> bad_;
  std::shared_ptr<const data::ChatPacking> train_rows_, val_rows_;  // val_rows_ may be null
};

// The ConfigError text for more bad records than allowed: the count, the
// first `shown` by file:line and reason, then how many more.
std::string badRecordsMessage(const std::vector<data::BadRecord>& bad, int64_t allowed, size_t shown = 10);

}  // namespace dtrain
