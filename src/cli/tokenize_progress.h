// What `dtrain tokenize` shows while it works, on stderr: a bar redrawn in
// place on a terminal, or a plain line every few seconds otherwise (a log
// file, CI); both print a line for each shard written.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "data/corpus_tokenizer.h"

namespace dtrain::cli {

class TokenizeProgress {
 public:
  // Bar on a terminal (stderr a TTY), lines otherwise.
  TokenizeProgress();
  ~TokenizeProgress();
  TokenizeProgress(const TokenizeProgress&) = delete;
  TokenizeProgress& operator=(const TokenizeProgress&) = delete;

  void update(const data::CorpusProgress& progress);
  // Ends the bar's line.
  void finish();
  double elapsedSeconds() const;

 private:
  void draw(const data::CorpusProgress& progress);

  bool bar_;
  bool bar_open_ = false;
  bool drew_end_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "12.3 MB", "512 KB", "17 B" (decimal units, as throughput is usually quoted).
std::string formatBytes(double bytes);
// "1.23M", "45.6k", "789".
std::string formatCount(double count);

}  // namespace dtrain::cli
