// What the two halves of JobCheckpoint (job_checkpoint.cc saves,
// job_checkpoint_resume.cc resumes) share: how the ranks of a collective
// step learn how each rank's part ended, so that all throw together
// instead of waiting in the next collective, and the numbers of their log
// lines. (private to train/)
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "common/error.h"
#include "dtrain/init.h"

namespace dtrain::checkpoint_steps {

using Clock = std::chrono::steady_clock;
inline const std::string kPrefix = "ckpt";

// How a rank's part of a collective step ended: what every rank learns,
// so that all throw together instead of waiting in the next collective.
enum Outcome { kOk = 0, kConfigError = 1, kIoError = 2 };

inline Outcome outcomeOf(const std::exception_ptr& error) {
  if (!error) return kOk;
  try {
    std::rethrow_exception(error);
  } catch (const ConfigError&) {
    return kConfigError;
  } catch (...) {
    return kIoError;
  }
}

// Every rank's values (the same count on each), through one all-reduce.
inline std::vector<std::vector<double>> exchange(Context& ctx, const std::vector<double>& mine) {
  const size_t n = mine.size();
  std::vector<double> all(n * static_cast<size_t>(ctx.size()), 0.0);
  std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(n * static_cast<size_t>(ctx.rank())));
  ctx.allreduceSum(all);
  std::vector<std::vector<double>> out;
  for (int r = 0; r < ctx.size(); ++r) {
    out.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(n * r), all.begin() + static_cast<std::ptrdiff_t>(n * (r + 1)));
  }
  return out;
}

inline int64_t asInt(double value) { return static_cast<int64_t>(std::llround(value)); }

// Every rank's text, in rank order (a collective: two exchanges, the
// lengths, then the bytes, one per double).
inline std::vector<std::string> exchangeText(Context& ctx, const std::string& mine) {
  size_t longest = 0;
  for (const auto& length : checkpoint_steps::exchange(ctx, {static_cast<double>(mine.size())})) {
    longest = std::max(longest, static_cast<size_t>(asInt(length[0])));
  }
  std::vector<double> bytes(longest + 1, 0.0);
  bytes[0] = static_cast<double>(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) bytes[i + 1] = static_cast<unsigned char>(mine[i]);
  std::vector<std::string> out;
  for (const auto& theirs : checkpoint_steps::exchange(ctx, bytes)) {
    std::string text(static_cast<size_t>(asInt(theirs[0])), '\0');
    for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(asInt(theirs[i + 1]));
    out.push_back(std::move(text));
  }
  return out;
}

// After exchange(): rethrows this rank's error, or throws one of the kind
// the first failing rank had, naming it. `what` says what failed.
inline void throwIfAnyFailed(const std::vector<std::vector<double>>& outcomes, const std::exception_ptr& mine,
                             const std::string& what) {
  if (mine) std::rethrow_exception(mine);
  for (size_t r = 0; r < outcomes.size(); ++r) {
    const int64_t code = asInt(outcomes[r][0]);
    if (code == kOk) continue;
    const std::string why = what + ": rank " + std::to_string(r) + " failed (see its error)";
    if (code == kConfigError) throw ConfigError(why);
    throw IoError(why);
  }
}

inline std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f GiB", bytes / double(int64_t{1} << 30));
  return text;
}

inline std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f s", s);
  return text;
}

inline double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace dtrain::checkpoint_steps
