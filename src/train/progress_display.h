// ProgressDisplay: what rank 0 of `dtrain train` shows while it trains (a
// TrainObserver): a progress bar on a terminal, plain periodic lines
// otherwise (logs, CI), and one JSON object per line in --metrics-jsonl for
// machines; the evaluations, the final summary line and, on request, the
// bucket table of the last backward. Language models report tokens/s, MFU
// (when the GPU's peak is known), validation loss and perplexity instead of
// samples/s and accuracy. (private to train/)
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include "train/train_observer.h"
#include "train/train_options.h"  // ProgressMode

namespace dtrain {

class ProgressDisplay : public TrainObserver {
 public:
  // mode: auto (bar when stderr is a terminal, else lines) | bar | lines |
  // none. metrics_path: "" or a file appended to (IoError when it cannot
  // be opened).
  ProgressDisplay(ProgressMode mode, const std::string& metrics_path);
  ~ProgressDisplay() override;

  // On a terminal (bar mode) the bar moves after every step, at most four
  // times a second, with the loss and rate of the last report; lines and
  // metrics come every --log-every steps (a report syncs the device).
  void stepFinished(int64_t step, bool graphed) override;
  // The run's length, so the bar can move before the first report.
  void planned(int64_t total_steps, int64_t epochs, int64_t first_step);
  void intervalEnded(const StepReport& report, const BackwardTimeline* sampled) override;
  void evaluated(const EvalReport& report) override;
  // A "straggler_window" record in --metrics-jsonl (no line on the console:
  // the monitor logs the flags).
  void stragglerWindow(const StragglerReport& report) override;
  void message(const std::string& text) override;
  // The final line (always printed unless mode is none) and metrics record.
  void finished(const RunSummary& summary) override;
  // When each bucket's all-reduce ran against the end of backward
  // (--print-bucket-timeline), printed and recorded.
  void bucketTable(const BackwardTimeline& timeline);

 private:
  // Language models: validation loss and perplexity, tokens/s and MFU.
  void languageModelEvaluated(const EvalReport& report);
  void languageModelFinished(const RunSummary& summary);
  void endBar();
  void drawBar(int64_t step);
  void writeMetrics(const std::string& json_line);

  bool bar_ = false;
  bool lines_ = false;
  bool bar_open_ = false;
  // What the bar shows between reports.
  std::optional<StepReport> last_;
  int64_t total_steps_ = 0, epochs_ = 0, first_step_ = 0;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point drawn_{};
  std::ofstream metrics_;
  std::string metrics_path_;
};

// "1h02m", "3m05s", "42s".
std::string formatDuration(double seconds);

}  // namespace dtrain
