// What rank 0 of `dtrain train` shows while it trains: a progress bar on a
// terminal, plain periodic lines otherwise (logs, CI), and one JSON object
// per line in --metrics-jsonl for machines.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "dtrain/data_parallel.h"

namespace dtrain {

struct StepReport {
  int64_t step = 0;         // steps done so far (global)
  int64_t total_steps = 0;
  int64_t epoch = 0;        // 0-based
  int64_t epochs = 0;
  double loss = 0;          // mean over the steps since the last report
  double lr = 0;
  double samples_per_s = 0;  // all ranks, since the last report
  double elapsed_s = 0;
};

struct EvalReport {
  int64_t epoch = 0;
  int64_t step = 0;
  double accuracy = 0;  // 0..1
  int64_t correct = 0;
  int64_t total = 0;
  double loss = 0;
};

class ProgressReporter {
 public:
  // mode: auto (bar when stderr is a terminal, else lines) | bar | lines | none.
  // ConfigError for another mode. metrics_path: "" or a file appended to.
  ProgressReporter(const std::string& mode, const std::string& metrics_path);
  ~ProgressReporter();

  void step(const StepReport& report);
  void eval(const EvalReport& report);
  // The final line (always printed unless mode is none) and metrics record.
  void summary(const EvalReport& final_eval, int64_t steps, int64_t samples, double wall_s, int world_size);
  // Per-bucket all-reduce timings of one backward (--timeline).
  void timeline(const BackwardTimeline& timeline);
  // A plain message that must not be overwritten by the bar.
  void message(const std::string& text);

 private:
  void endBar();
  void writeMetrics(const std::string& json_line);

  bool bar_ = false;
  bool lines_ = false;
  bool bar_open_ = false;
  std::ofstream metrics_;
  std::string metrics_path_;
};

// "1h02m", "3m05s", "42s".
std::string formatDuration(double seconds);

}  // namespace dtrain
