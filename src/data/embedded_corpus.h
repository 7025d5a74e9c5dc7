// The embedded default corpus for language models: Debian's fortunes
// (English text, ~2.6 MB in 43 files under /usr/share/games/fortunes,
// installed by scripts/setup.sh), tokenized once into a cache and reused
// (torch-free; library dtrain_text).
//
// Fortunes are split into documents at their "%" lines. The files are read
// in name order, except the ASCII-art ones, which go last so that the
// validation split (the first 5% of the bytes, data/corpus_tokenizer.h) is
// prose.
//
// The cache folder is <cache>/fortunes-<tokenizer>-<key>/, where the key
// hashes the corpus files (names, sizes, modification times), the
// tokenizer and its files: a changed input makes a new folder. A folder is
// written under a temporary name and renamed into place, so ranks that
// prepare it at the same time never see a half-written one.
#pragma once

#include <string>
#include <vector>

namespace dtrain::data {

// Where Debian's fortunes package installs its files.
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// The corpus files in reading order. ConfigError naming `dir` and the
// package to install when it holds none.
std::vector<std::string> embeddedCorpusFiles(const std::string& dir = kFortunesDir);

// $XDG_CACHE_HOME/dtrain, else $HOME/.cache/dtrain, else /tmp/dtrain-cache.
std::string defaultCacheDir();

// The folder of the tokenized corpus (train and val shards), tokenizing it
// first when the cache lacks it. `tokenizer_path` as makeTokenizer's
// (data/tokenizer.h). Errors of the tokenizer, the corpus and the cache
// folder (ConfigError / IoError naming it).
std::string preparedEmbeddedCorpus(const std::string& tokenizer_kind, const std::string& tokenizer_path,
                                   const std::string& cache_dir, const std::string& corpus_dir = kFortunesDir);

}  // namespace dtrain::data
