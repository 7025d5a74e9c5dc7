// Text files to token shards: what `dtrain tokenize` does (torch-free;
// library dtrain_text).
//
// Every file is checked first (it exists, is readable and is UTF-8:
// ConfigError naming the file, and the byte offset of the first bad byte),
// so a bad file costs nothing. Then the files are read in order, one at a
// time, split into documents (data/document_split.h), encoded on `threads`
// threads with the end-of-text id before each document (documentFrame in
// data/tokenizer.h: Llama 3's tokenizer begins and ends it), and written as a
// shard series (data/token_shard_series.h). The shards do not depend on the
// number of threads.
//
// The validation split: the documents that start within the first
// val_fraction of the input bytes (so at least the first document when
// val_fraction > 0) go to the validation shard(s), the rest to training.
// ConfigError, and nothing left written, when that leaves no document for
// training, or when the input holds no document at all.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/document_split.h"
#include "data/token_shard_series.h"
#include "data/tokenizer.h"

namespace dtrain::data {

struct CorpusOptions {
  std::string out_dir;
  std::string name = "tokens";
  double val_fraction = 0;  // [0, 1)
  int64_t shard_tokens = 100'000'000;
  int threads = 1;
  DocumentSplit split;
};

struct CorpusProgress {
  int64_t bytes_done = 0, bytes_total = 0;
  int64_t documents = 0, tokens = 0;
  // The shards written since the last report (usually none).
  std::vector<WrittenShard> new_shards;
};

struct CorpusSummary {
  int64_t files = 0, bytes = 0;
  int64_t documents = 0, validation_documents = 0;
  int64_t tokens = 0, validation_tokens = 0;
  std::vector<WrittenShard> shards;
};

// `progress` (may be empty) is called on this thread after each encoded
// batch and once at the end.
CorpusSummary tokenizeCorpus(const std::vector<std::string>& files, const Tokenizer& tokenizer,
                             const CorpusOptions& options, const std::function<void(const CorpusProgress&)>& progress);

}  // namespace dtrain::data
