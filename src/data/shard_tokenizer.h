// The tokenizer a series of token shards was made with, in a small file
// beside them, so that a model trained on the shards can turn its ids back
// into text (`dtrain generate` without --tokenizer) (torch-free; library
// dtrain_text):
//
//   <dir>/<name>_tokenizer.json   {"kind": "hf", "path": "/abs/llama3", "vocab_size": 128256}
//
// `dtrain tokenize` writes it beside <dir>/<name>_train_*.bin; `dtrain train`
// on those shards names the tokenizer in its checkpoints. Shards of other
// writers (llm.c's) have none, and their checkpoints name no tokenizer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::data {

struct ShardTokenizer {
  std::string kind;  // a word of tokenizerKinds()
  std::string path;  // its files, as makeTokenizer takes them ("" for byte)
};

// The file's path for the series `name` in `dir`.
std::string shardTokenizerPath(const std::string& dir, const std::string& name);

// Writes the file (the path made absolute, so the shards can be used from
// anywhere). IoError naming the file when it cannot be written.
void writeShardTokenizer(const std::string& dir, const std::string& name, const ShardTokenizer& tokenizer,
                         int64_t vocab_size);

// The tokenizer of the shards at `paths` (named as llm.c names them,
// <name>_train_NNNNNN.bin or <name>_val_NNNNNN.bin; each series' file is
// looked for beside its shards). nullopt when a shard is not so named or a
// series has no file. ConfigError naming the file when one is not what
// writeShardTokenizer writes, and naming two files that name different
// tokenizers (the shards would mix two tokenizers' ids).
std::optional<ShardTokenizer> shardTokenizer(const std::vector<std::string>& paths);

}  // namespace dtrain::data
