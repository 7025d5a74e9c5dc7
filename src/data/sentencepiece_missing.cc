// SentencePiece in a build without libsentencepiece: both entry points say so.
#include "common/error.h"
#include "data/sentencepiece_tokenizer.h"

namespace dtrain::data {
namespace {

[[noreturn]] void noSentencePiece(const std::string& what) {
  throw ConfigError(what + ": this dtrain was built without SentencePiece (libsentencepiece-dev was not found "
                    "when it was configured); install it (scripts/setup.sh does) and rebuild, or use the byte or "
                    "gpt2 tokenizer");
}

}  // namespace

std::unique_ptr<Tokenizer> makeSentencePieceTokenizer(const std::string& model_path) {
  noSentencePiece("SentencePiece model " + model_path);
}

void trainSentencePiece(const SentencePieceTraining& training, const std::vector<std::string>& files) {
  noSentencePiece("training SentencePiece model " + training.model_prefix);
}

bool haveSentencePiece() { return false; }

}  // namespace dtrain::data
