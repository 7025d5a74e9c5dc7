#include "cli/tokenize_progress.h"

#include <unistd.h>

#include <cstdio>
#include <string>

namespace dtrain::cli {
namespace {

using Clock = std::chrono::steady_clock;

// A bar redraws at most this often; lines come this far apart.
constexpr auto kBarInterval = std::chrono::milliseconds(100);
constexpr auto kLineInterval = std::chrono::seconds(5);

std::string scaled(double value, const char* const* units, double base) {
  int unit = 0;
  while (value >= base && units[unit + 1] != nullptr) value /= base, ++unit;
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f%s" : "%.1f%s", value, units[unit]);
  return text;
}

}  // namespace

std::string formatBytes(double bytes) {
  static const char* const units[] = {" B", " KB", " MB", " GB", " TB", nullptr};
  return scaled(bytes, units, 1000);
}

std::string formatCount(double count) {
  static const char* const units[] = {"", "k", "M", "G", "T", nullptr};
  return scaled(count, units, 1000);
}

TokenizeProgress::TokenizeProgress()
    : bar_(::isatty(STDERR_FILENO) != 0), start_(Clock::now()), last_draw_(start_) {}

TokenizeProgress::~TokenizeProgress() { finish(); }

double TokenizeProgress::elapsedSeconds() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

void TokenizeProgress::finish() {
  if (bar_open_) std::fputc('\n', stderr);
  bar_open_ = false;
}

void TokenizeProgress::update(const data::CorpusProgress& progress) {
  for (const data::WrittenShard& shard : progress.new_shards) {
    if (bar_open_) std::fputs("\r\x1b[K", stderr);
    bar_open_ = false;
    std::fprintf(stderr, "wrote %s (%s tokens)\n", shard.path.c_str(), formatCount(static_cast<double>(shard.tokens)).c_str());
  }
  const auto now = Clock::now();
  const bool done = progress.bytes_done >= progress.bytes_total;
  if (done && drew_end_) return;
  drew_end_ = done;
  if (done || now - last_draw_ >= (bar_ ? kBarInterval : std::chrono::duration_cast<Clock::duration>(kLineInterval))) {
    last_draw_ = now;
    draw(progress);
  }
}

void TokenizeProgress::draw(const data::CorpusProgress& p) {
  const double elapsed = elapsedSeconds();
  const double total = static_cast<double>(p.bytes_total), done = static_cast<double>(p.bytes_done);
  const double fraction = total > 0 ? done / total : 1;
  const double rate = elapsed > 0 ? done / elapsed : 0;
  const double eta = rate > 0 ? (total - done) / rate : 0;
  char text[256];
  std::snprintf(text, sizeof(text), "%3.0f%% %s of %s, %s documents, %s tokens, %s/s, eta %.0f s", fraction * 100,
                formatBytes(done).c_str(), formatBytes(total).c_str(),
                formatCount(static_cast<double>(p.documents)).c_str(),
                formatCount(static_cast<double>(p.tokens)).c_str(), formatBytes(rate).c_str(), eta);
  if (!bar_) {
    std::fprintf(stderr, "tokenize: %s\n", text);
    return;
  }
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(fraction * kWidth);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  std::fprintf(stderr, "\r[%s] %s\x1b[K", bar.c_str(), text);
  std::fflush(stderr);
  bar_open_ = true;
}

}  // namespace dtrain::cli
