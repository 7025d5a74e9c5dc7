// SentencePiece (Google's libsentencepiece, optional at build time):
// loading a model as a Tokenizer and training one (torch-free; library
// dtrain_text). Builds without the library keep both entry points; they
// throw ConfigError saying that this build has no SentencePiece.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/document_split.h"
#include "data/tokenizer.h"

namespace dtrain::data {

// The model file `model_path` (as written by trainSentencePiece or
// spm_train). ConfigError naming the file when it is missing or not a
// model, or when the model has no </s> (eos) piece to end a text with.
std::unique_ptr<Tokenizer> makeSentencePieceTokenizer(const std::string& model_path);

struct SentencePieceTraining {
  std::string model_prefix;  // writes <prefix>.model and <prefix>.vocab
  int vocab_size = 8000;
  std::string model_type = "bpe";  // "bpe" or "unigram"
  int threads = 1;
  DocumentSplit split;  // how the files divide into documents
};

// Trains on the lines of the documents of `files` (each checked to be
// UTF-8 like `dtrain tokenize` input). The model keeps text as it is
// (identity normalization, runs of spaces kept), splits digits, and falls
// back to byte pieces for characters it has no piece for, so decode(encode(
// text)) == text for any UTF-8 text. ConfigError for bad input or a vocab
// size the text cannot fill (with SentencePiece's own message).
void trainSentencePiece(const SentencePieceTraining& training, const std::vector<std::string>& files);

}  // namespace dtrain::data
