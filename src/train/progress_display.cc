#include "train/progress_display.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "train/train_settings.h"

namespace dtrain {

std::string formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof(text), "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>((s % 3600) / 60));
  } else if (s >= 60) {
    std::snprintf(text, sizeof(text), "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(text, sizeof(text), "%llds", static_cast<long long>(s));
  }
  return text;
}

ProgressDisplay::ProgressDisplay(ProgressMode mode, const std::string& metrics_path) : metrics_path_(metrics_path) {
  switch (mode) {
    case ProgressMode::kAuto:
      // Our terminal, or the launcher's when our stderr reaches it through
      // its log router (dtrain launch sets the variable then).
      bar_ = isatty(STDERR_FILENO) != 0 || progressTerminalSetting();
      lines_ = !bar_;
      break;
    case ProgressMode::kBar: bar_ = true; break;
    case ProgressMode::kLines: lines_ = true; break;
    case ProgressMode::kNone: break;
  }
  if (!metrics_path.empty()) {
    metrics_.open(metrics_path, std::ios::app);
    if (!metrics_) throw IoError("--metrics-jsonl: cannot open '" + metrics_path + "' for appending");
  }
}

ProgressDisplay::~ProgressDisplay() { endBar(); }

void ProgressDisplay::endBar() {
  if (bar_open_) {
    std::fputc('\n', stderr);
    bar_open_ = false;
  }
}

void ProgressDisplay::writeMetrics(const std::string& json_line) {
  if (!metrics_.is_open()) return;
  metrics_ << json_line << '\n';
  metrics_.flush();
  if (!metrics_) throw IoError("--metrics-jsonl: writing '" + metrics_path_ + "' failed");
}

void ProgressDisplay::intervalEnded(const StepReport& r, const BackwardTimeline* /*sampled*/) {
  nlohmann::json record{{"event", "step"}, {"step", r.step},
                        {"epoch", r.epoch}, {"loss", r.loss},
                        {"lr", r.lr},       {"samples_per_s", r.samples_per_s},
                        {"elapsed_s", r.elapsed_s}};
  if (r.tokens_per_s > 0) record["tokens_per_s"] = r.tokens_per_s;
  if (r.mfu >= 0) record["mfu"] = r.mfu;
  if (r.pp_bubble >= 0) record["pp_bubble"] = r.pp_bubble;
  writeMetrics(record.dump());
  const double fraction = r.total_steps > 0 ? static_cast<double>(r.step) / static_cast<double>(r.total_steps) : 0;
  const double eta = fraction > 0 ? r.elapsed_s * (1 - fraction) / fraction : NAN;
  char rate[64];
  if (r.tokens_per_s > 0) {
    std::snprintf(rate, sizeof(rate), "%.0f tokens/s", r.tokens_per_s);
  } else {
    std::snprintf(rate, sizeof(rate), "%.0f samples/s", r.samples_per_s);
  }
  char mfu[32] = "";
  if (r.mfu >= 0) std::snprintf(mfu, sizeof(mfu), " MFU %.1f%%", r.mfu * 100);
  char bubble[32] = "";
  if (r.pp_bubble >= 0) std::snprintf(bubble, sizeof(bubble), " bubble %.1f%%", r.pp_bubble * 100);
  last_ = r;
  if (bar_) {
    drawBar(r.step);
    return;
  }
  if (!lines_) return;
  char head[352];
  std::snprintf(head, sizeof(head), "epoch %lld/%lld step %lld/%lld loss %.4f lr %.4g %s%s%s eta %s",
                static_cast<long long>(r.epoch + 1), static_cast<long long>(r.epochs),
                static_cast<long long>(r.step), static_cast<long long>(r.total_steps), r.loss, r.lr, rate, mfu,
                bubble, formatDuration(eta).c_str());
  std::fprintf(stderr, "%s\n", head);
}

void ProgressDisplay::stragglerWindow(const StragglerReport& r) {
  nlohmann::json ms = nlohmann::json::array();
  for (double seconds : r.seconds) ms.push_back(seconds * 1e3);
  writeMetrics(nlohmann::json{{"event", "straggler_window"},
                              {"step", r.step},
                              {"window", r.window},
                              {"window_steps", r.window_steps},
                              {"median_ms", r.median_s * 1e3},
                              {"compute_ms", ms},
                              {"ratio", r.ratio},
                              {"flagged", r.flagged}}
                   .dump());
}

void ProgressDisplay::planned(int64_t total_steps, int64_t epochs, int64_t first_step) {
  total_steps_ = total_steps;
  epochs_ = epochs;
  first_step_ = first_step;
  started_ = std::chrono::steady_clock::now();
}

void ProgressDisplay::stepFinished(int64_t step, bool /*graphed*/) {
  if (!bar_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - drawn_ < std::chrono::milliseconds(250)) return;
  drawBar(step + 1);
}

// The bar at `step` (steps done): the fraction and an ETA from the time
// since the run started; the loss, rate and epoch of the last report.
void ProgressDisplay::drawBar(int64_t step) {
  drawn_ = std::chrono::steady_clock::now();
  const int64_t total = last_ ? last_->total_steps : total_steps_;
  const double fraction = total > 0 ? std::min(1.0, static_cast<double>(step) / static_cast<double>(total)) : 0;
  const double elapsed = std::chrono::duration<double>(drawn_ - started_).count();
  const double done = static_cast<double>(step - first_step_);
  const double eta = done > 0 && total > 0 ? elapsed * static_cast<double>(total - step) / done : NAN;
  std::string detail = "loss -";
  if (last_) {
    char text[160];
    std::snprintf(text, sizeof(text), "loss %.4f lr %.4g %.0f %s", last_->loss, last_->lr,
                  last_->tokens_per_s > 0 ? last_->tokens_per_s : last_->samples_per_s,
                  last_->tokens_per_s > 0 ? "tokens/s" : "samples/s");
    detail = text;
  }
  char head[352];
  std::snprintf(head, sizeof(head), "epoch %lld/%lld step %lld/%lld %s eta %s",
                static_cast<long long>((last_ ? last_->epoch : 0) + 1),
                static_cast<long long>(last_ ? last_->epochs : epochs_), static_cast<long long>(step),
                static_cast<long long>(total), detail.c_str(), formatDuration(eta).c_str());
  const int width = 24;
  const int filled = static_cast<int>(fraction * width);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(width - filled), '.');
  std::fprintf(stderr, "\r[%s] %3.0f%% %s\x1b[K", bar.c_str(), fraction * 100, head);
  std::fflush(stderr);
  bar_open_ = true;
}

void ProgressDisplay::evaluated(const EvalReport& r) {
  const Evaluation& e = r.result;
  if (!e.classifier()) {
    languageModelEvaluated(r);
    return;
  }
  writeMetrics(nlohmann::json{{"event", "eval"},
                              {"epoch", r.epoch},
                              {"step", r.step},
                              {"accuracy", e.accuracy()},
                              {"correct", e.correct},
                              {"total", e.samples},
                              {"loss", e.loss}}
                   .dump());
  if (!bar_ && !lines_) return;
  endBar();
  std::fprintf(stderr, "eval epoch %lld: test accuracy %.2f%% (%lld/%lld) loss %.4f\n",
               static_cast<long long>(r.epoch + 1), e.accuracy() * 100, static_cast<long long>(e.correct),
               static_cast<long long>(e.samples), e.loss);
}

void ProgressDisplay::languageModelEvaluated(const EvalReport& r) {
  const Evaluation& e = r.result;
  nlohmann::json record{{"event", "eval"}, {"epoch", r.epoch}, {"step", r.step}, {"tokens", e.samples}};
  if (e.samples > 0) {
    record["val_loss"] = e.loss;
    record["perplexity"] = std::exp(e.loss);
  }
  writeMetrics(record.dump());
  if (!bar_ && !lines_) return;
  endBar();
  if (e.samples == 0) {
    std::fprintf(stderr, "eval step %lld: no validation data\n", static_cast<long long>(r.step));
    return;
  }
  std::fprintf(stderr, "eval step %lld: val loss %.4f perplexity %.2f (%lld tokens)\n",
               static_cast<long long>(r.step), e.loss, std::exp(e.loss), static_cast<long long>(e.samples));
}

void ProgressDisplay::languageModelFinished(const RunSummary& s) {
  const Evaluation& e = s.final_eval;
  const double rate = s.train_s > 0 ? static_cast<double>(s.tokens) / s.train_s : 0;
  nlohmann::json record{{"event", "summary"}, {"steps", s.steps},   {"tokens", s.tokens},
                        {"wall_s", s.wall_s}, {"train_s", s.train_s}, {"tokens_per_s", rate},
                        {"world_size", s.world_size}};
  if (e.samples > 0) {
    record["val_loss"] = e.loss;
    record["perplexity"] = std::exp(e.loss);
  }
  if (s.mfu >= 0) record["mfu"] = s.mfu;
  if (s.peak_memory_bytes > 0) record["peak_memory_bytes"] = s.peak_memory_bytes;
  writeMetrics(record.dump());
  endBar();
  char judged[96] = "no validation data";
  if (e.samples > 0) std::snprintf(judged, sizeof(judged), "val loss %.4f perplexity %.2f", e.loss, std::exp(e.loss));
  char mfu[32] = "";
  if (s.mfu >= 0) std::snprintf(mfu, sizeof(mfu), ", MFU %.1f%%", s.mfu * 100);
  char peak[64] = "";
  if (s.peak_memory_bytes > 0) {
    std::snprintf(peak, sizeof(peak), ", peak memory %.2f GiB per GPU",
                  static_cast<double>(s.peak_memory_bytes) / static_cast<double>(int64_t{1} << 30));
  }
  std::fprintf(stdout, "dtrain train: %s, %lld steps, %lld tokens on %d rank(s), wall %.1f s, %.0f tokens/s%s%s\n",
               judged, static_cast<long long>(s.steps), static_cast<long long>(s.tokens), s.world_size, s.wall_s,
               rate, mfu, peak);
  std::fflush(stdout);
}

void ProgressDisplay::finished(const RunSummary& s) {
  if (!s.final_eval.classifier()) {
    languageModelFinished(s);
    return;
  }
  const Evaluation& e = s.final_eval;
  const double rate = s.wall_s > 0 ? static_cast<double>(s.samples) / s.wall_s : 0;
  writeMetrics(nlohmann::json{{"event", "summary"},
                              {"accuracy", e.accuracy()},
                              {"correct", e.correct},
                              {"total", e.samples},
                              {"steps", s.steps},
                              {"samples", s.samples},
                              {"wall_s", s.wall_s},
                              {"samples_per_s", rate},
                              {"world_size", s.world_size}}
                   .dump());
  endBar();
  std::fprintf(stdout, "dtrain train: test accuracy %.2f%% (%lld/%lld), %lld steps, %lld samples on %d rank(s), "
               "wall %.1f s, %.0f samples/s\n",
               e.accuracy() * 100, static_cast<long long>(e.correct), static_cast<long long>(e.samples),
               static_cast<long long>(s.steps), static_cast<long long>(s.samples), s.world_size, s.wall_s, rate);
  std::fflush(stdout);
}

void ProgressDisplay::bucketTable(const BackwardTimeline& t) {
  nlohmann::json buckets = nlohmann::json::array();
  for (const auto& b : t.buckets) {
    buckets.push_back({{"bytes", b.bytes}, {"ready_ms", b.ready_ms}, {"start_ms", b.start_ms}, {"end_ms", b.end_ms}});
  }
  writeMetrics(nlohmann::json{{"event", "timeline"}, {"backward_end_ms", t.backward_end_ms}, {"buckets", buckets}}
                   .dump());
  if (!bar_ && !lines_) return;
  endBar();
  std::fprintf(stderr, "timeline of the last backward (ms after its first gradient); backward ends at %.3f ms\n",
               t.backward_end_ms);
  std::fprintf(stderr, "%7s %10s %10s %12s %12s %s\n", "bucket", "MiB", "ready", "reduce-start", "reduce-end",
               "overlaps-backward");
  for (size_t i = 0; i < t.buckets.size(); ++i) {
    const auto& b = t.buckets[i];
    std::fprintf(stderr, "%7zu %10.3f %10.3f %12.3f %12.3f %s\n", i, b.bytes / 1048576.0, b.ready_ms, b.start_ms,
                 b.end_ms, b.start_ms < t.backward_end_ms ? "yes" : "no");
  }
}

void ProgressDisplay::message(const std::string& text) {
  endBar();
  std::fprintf(stderr, "%s\n", text.c_str());
}

}  // namespace dtrain
