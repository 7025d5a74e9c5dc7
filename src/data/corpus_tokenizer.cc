#include "data/corpus_tokenizer.h"

#include <memory>

#include "common/error.h"
#include "common/options.h"
#include "data/parallel_encoder.h"
#include "data/text_files.h"

namespace dtrain::data {
namespace {

// Text per batch: large enough to amortize the hand-off between threads,
// small enough to keep every thread busy on a few files.
constexpr int64_t kBatchBytes = 256 << 10;

class CorpusRun {
 public:
  CorpusRun(const Tokenizer& tokenizer, const CorpusOptions& options,
            const std::function<void(const CorpusProgress&)>& progress)
      : options_(options),
        progress_(progress),
        writer_(options.out_dir, options.name, options.shard_tokens, tokenizer.vocabSize()),
        encoder_(tokenizer, options.threads) {}

  CorpusSummary run(const std::vector<InputFile>& inputs) {
    for (const InputFile& input : inputs) report_.bytes_total += input.bytes;
    validation_bytes_ = static_cast<int64_t>(options_.val_fraction * static_cast<double>(report_.bytes_total));
    try {
      int64_t file_start = 0;
      for (const InputFile& input : inputs) {
        addFile(input.path, file_start);
        file_start += input.bytes;
      }
      while (encoder_.pending() > 0) consume(encoder_.next());
      checkSplits();  // before the last shard is written: usually nothing is, then
      summary_.shards = writer_.finish();
      reportProgress();
    } catch (...) {
      writer_.removeWritten();
      throw;
    }
    summary_.files = static_cast<int64_t>(inputs.size());
    summary_.bytes = report_.bytes_total;
    return summary_;
  }

 private:
  void addFile(const std::string& path, int64_t file_start) {
    auto text = std::make_shared<const std::string>(readFileBytes(path));
    requireUtf8(*text, path);
    std::vector<std::string_view> documents;
    splitDocuments(*text, options_.split, documents);
    DocumentBatch batch{text, {}, false, 0};
    int64_t accounted = 0;  // bytes of this file given to a batch so far
    for (std::string_view document : documents) {
      const int64_t offset = document.data() - text->data();
      // The first document always: a validation split is never empty.
      const bool validation =
          options_.val_fraction > 0 && (documents_seen_++ == 0 || file_start + offset < validation_bytes_);
      if (!batch.documents.empty() && validation != batch.validation) submit(batch, text, offset, accounted);
      batch.validation = validation;
      batch.documents.push_back(document);
      batch.bytes += static_cast<int64_t>(document.size());
      if (batch.bytes >= kBatchBytes) submit(batch, text, offset + document.size(), accounted);
    }
    submit(batch, text, static_cast<int64_t>(text->size()), accounted);
  }

  // Hands `batch` (accounting for the file's bytes up to `end`) to the
  // encoder and starts a new one.
  void submit(DocumentBatch& batch, const std::shared_ptr<const std::string>& text, int64_t end, int64_t& accounted) {
    batch.bytes = end - accounted;
    accounted = end;
    while (encoder_.pending() >= encoder_.capacity()) consume(encoder_.next());
    const bool validation = batch.validation;
    encoder_.submit(std::move(batch));
    batch = DocumentBatch{text, {}, validation, 0};
  }

  void consume(EncodedBatch encoded) {
    writer_.append(encoded.tokens, encoded.validation);
    const auto tokens = static_cast<int64_t>(encoded.tokens.size());
    summary_.documents += encoded.documents;
    summary_.tokens += tokens;
    if (encoded.validation) {
      summary_.validation_documents += encoded.documents;
      summary_.validation_tokens += tokens;
    }
    report_.bytes_done += encoded.bytes;
    report_.documents = summary_.documents;
    report_.tokens = summary_.tokens;
    reportProgress();
  }

  void reportProgress() {
    const auto& written = writer_.written();
    report_.new_shards.assign(written.begin() + static_cast<long>(reported_shards_), written.end());
    reported_shards_ = written.size();
    if (progress_) progress_(report_);
  }

  void checkSplits() const {
    if (summary_.documents == 0) {
      throw ConfigError("the input files hold no text (every document is empty or whitespace); nothing to tokenize");
    }
    if (options_.val_fraction > 0 && summary_.documents == summary_.validation_documents) {
      throw ConfigError("--val-fraction " + formatNumber(options_.val_fraction) + " leaves no document for " +
                        "training: the input has " + std::to_string(summary_.documents) +
                        " document(s) and the validation split takes whole documents; split the text into more " +
                        "documents (--split-blank-lines or --doc-separator) or use --val-fraction 0");
    }
  }

  const CorpusOptions& options_;
  const std::function<void(const CorpusProgress&)>& progress_;
  TokenShardSeriesWriter writer_;
  ParallelEncoder encoder_;
  int64_t validation_bytes_ = 0;
  int64_t documents_seen_ = 0;
  CorpusProgress report_;
  size_t reported_shards_ = 0;
  CorpusSummary summary_;
};

}  // namespace

CorpusSummary tokenizeCorpus(const std::vector<std::string>& files, const Tokenizer& tokenizer,
                             const CorpusOptions& options, const std::function<void(const CorpusProgress&)>& progress) {
  if (files.empty()) throw ConfigError("no input files given; expected one or more UTF-8 text files");
  if (!(options.val_fraction >= 0 && options.val_fraction < 1)) {
    throw ConfigError("validation fraction " + formatNumber(options.val_fraction) + ": expected 0 <= F < 1");
  }
  const std::vector<InputFile> inputs = checkInputFiles(files);
  CorpusRun run(tokenizer, options, progress);  // refuses an output directory with shards of this name
  // Every file is UTF-8 before any shard is written.
  for (const InputFile& input : inputs) requireUtf8(readFileBytes(input.path), input.path);
  return run.run(inputs);
}

}  // namespace dtrain::data
