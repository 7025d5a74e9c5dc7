#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>
#include <sys/stat.h>

#include "common/error.h"

namespace dtrain::data {
namespace {

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& model_path) : path_(model_path) {
    struct stat st {};
    if (::stat(model_path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      throw ConfigError("SentencePiece model " + model_path + " does not exist or is not a file; expected the "
                        "<prefix>.model that `dtrain tokenize --train-sentencepiece <prefix>` writes");
    }
    const auto status = processor_.Load(model_path);
    if (!status.ok()) {
      throw ConfigError("SentencePiece model " + model_path + " cannot be loaded: " + status.ToString() +
                        "; expected a .model file written by `dtrain tokenize --train-sentencepiece` or spm_train");
    }
    if (processor_.eos_id() < 0) {
      throw ConfigError("SentencePiece model " + model_path + " has no </s> (eos) piece; dtrain ends each "
                        "document with it, so expected a model trained with eos_id >= 0");
    }
  }

  std::vector<uint32_t> encode(std::string_view text) const override {
    std::vector<uint32_t> ids;
    encodeInto(text, ids);
    return ids;
  }

  void encodeInto(std::string_view text, std::vector<uint32_t>& ids) const override {
    std::vector<int> pieces;
    const auto status = processor_.Encode(text, &pieces);
    if (!status.ok()) throw ConfigError("SentencePiece (" + path_ + ") cannot encode: " + status.ToString());
    ids.insert(ids.end(), pieces.begin(), pieces.end());
  }

  std::string decode(const std::vector<uint32_t>& ids) const override {
    // SentencePiece drops </s> when decoding; the contract writes it out.
    std::string text;
    std::vector<int> segment;
    for (size_t i = 0; i <= ids.size(); ++i) {
      if (i < ids.size() && ids[i] != eotToken()) {
        if (ids[i] >= static_cast<uint32_t>(vocabSize())) {
          throw ConfigError("token id " + std::to_string(ids[i]) + " is not in the SentencePiece vocabulary of " +
                            path_ + " (ids 0.." + std::to_string(vocabSize() - 1) + ")");
        }
        segment.push_back(static_cast<int>(ids[i]));
        continue;
      }
      std::string decoded;
      const auto status = processor_.Decode(segment, &decoded);
      if (!status.ok()) throw ConfigError("SentencePiece (" + path_ + ") cannot decode: " + status.ToString());
      text += decoded;
      if (i < ids.size()) text += kEndOfTextText;
      segment.clear();
    }
    return text;
  }

  int64_t vocabSize() const override { return processor_.GetPieceSize(); }
  uint32_t eotToken() const override { return static_cast<uint32_t>(processor_.eos_id()); }
  std::string name() const override { return "sentencepiece"; }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace

std::unique_ptr<Tokenizer> makeSentencePieceTokenizer(const std::string& model_path) {
  return std::make_unique<SentencePieceTokenizer>(model_path);
}

bool haveSentencePiece() { return true; }

}  // namespace dtrain::data
