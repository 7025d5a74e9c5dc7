// The tokenizer a training checkpoint names (its meta "tokenizer": kind
// and path, data/tokenizer.h), written beside an exported Hugging Face
// model (`dtrain checkpoint export --format hf`) so that transformers'
// AutoTokenizer.from_pretrained(dir) loads it next to the model:
// - hf: tokenizer.json, with tokenizer_config.json and
//   special_tokens_map.json where the source directory has them.
// - gpt2: vocab.json and merges.txt (from the npm package's encoder.json
//   and vocab.bpe, the same contents, or Hugging Face's own files) and a
//   tokenizer_config.json naming GPT2Tokenizer with <|endoftext|> as bos,
//   eos and unk.
// - sentencepiece: the model as tokenizer.model and a tokenizer_config.json
//   naming LlamaTokenizer.
// - byte (no Hugging Face form), no tokenizer named, or a source that is
//   no longer where the checkpoint says: nothing written.
// Returns one line saying what was written or why nothing was; IoError
// when a file cannot be written.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace dtrain {

std::string writeHfTokenizerFiles(const nlohmann::json& checkpoint_meta, const std::string& dir,
                                  int64_t model_max_length);

}  // namespace dtrain
