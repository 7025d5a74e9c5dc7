// The entry points of the dtrain_sentencepiece module, which
// sentencepiece_loader.cc opens on first use (see there for why it is a
// module of its own). They call this module's own definitions.
#include "data/sentencepiece_tokenizer.h"

extern "C" {

std::unique_ptr<dtrain::data::Tokenizer>* dtrain_sentencepiece_tokenizer(const std::string* model_path) {
  return new std::unique_ptr<dtrain::data::Tokenizer>(dtrain::data::makeSentencePieceTokenizer(*model_path));
}

void dtrain_sentencepiece_train(const dtrain::data::SentencePieceTraining* training,
                                const std::vector<std::string>* files) {
  dtrain::data::trainSentencePiece(*training, *files);
}

}  // extern "C"
