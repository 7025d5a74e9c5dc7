#include <sentencepiece_trainer.h>

#include <string>
#include <unordered_map>

#include "common/error.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/text_files.h"

namespace dtrain::data {
namespace {

// The non-empty lines of the documents of the files, one file in memory at
// a time. SentencePiece learns from lines ("sentences").
class DocumentLines : public sentencepiece::SentenceIterator {
 public:
  DocumentLines(const std::vector<std::string>& files, DocumentSplit split) : files_(files), split_(std::move(split)) {
    Next();
  }
  bool done() const override { return done_; }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }
  void Next() override {
    while (!nextLine()) {
      if (file_index_ == files_.size()) {
        done_ = true;
        return;
      }
      loadFile(files_[file_index_++]);
    }
  }

 private:
  void loadFile(const std::string& path) {
    text_ = readFileBytes(path);
    requireUtf8(text_, path);
    documents_.clear();
    splitDocuments(text_, split_, documents_);
    document_ = 0;
    pos_ = 0;
  }
  // The next non-empty line of the current file into line_; false at its end.
  bool nextLine() {
    while (document_ < documents_.size()) {
      const std::string_view doc = documents_[document_];
      if (pos_ >= doc.size()) {
        ++document_, pos_ = 0;
        continue;
      }
      size_t end = doc.find('\n', pos_);
      if (end == std::string_view::npos) end = doc.size();
      line_.assign(doc.substr(pos_, end - pos_));
      pos_ = end + 1;
      if (!line_.empty()) return true;
    }
    return false;
  }

  const std::vector<std::string>& files_;
  DocumentSplit split_;
  size_t file_index_ = 0;
  std::string text_;
  std::vector<std::string_view> documents_;
  size_t document_ = 0, pos_ = 0;
  std::string line_;
  bool done_ = false;
};

}  // namespace

void trainSentencePiece(const SentencePieceTraining& training, const std::vector<std::string>& files) {
  checkInputFiles(files);
  // Bad input is refused before SentencePiece starts (and not thrown through it).
  for (const std::string& file : files) requireUtf8(readFileBytes(file), file);
  // Llama's choices: text kept as it is, digits split, unknown characters as
  // bytes, so any UTF-8 round-trips.
  const std::unordered_map<std::string, std::string> options = {
      {"model_prefix", training.model_prefix},
      {"vocab_size", std::to_string(training.vocab_size)},
      {"model_type", training.model_type},
      {"num_threads", std::to_string(training.threads)},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      {"byte_fallback", "true"},
      {"input_sentence_size", "10000000"},
      {"shuffle_input_sentence", "true"},
      {"minloglevel", "3"},  // its log writes std::cerr, which a DEEPBIND module must not touch
  };
  DocumentLines lines(files, training.split);
  const auto status = sentencepiece::SentencePieceTrainer::Train(options, &lines);
  if (!status.ok()) {
    throw ConfigError("SentencePiece training of " + training.model_prefix + ".model failed: " + status.ToString());
  }
}

}  // namespace dtrain::data
