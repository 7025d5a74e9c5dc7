// A small logger: "[dtrain <host>:<rank> <LEVEL> <time>] message" on stderr.
// The level comes from DTRAIN_LOG_LEVEL (debug|info|warn|error, default
// info). Lines from concurrent threads never interleave.
#pragma once

#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>

namespace dtrain {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

LogLevel logLevel();
void setLogLevel(LogLevel level);
// Parses debug|info|warn|warning|error|off; throws ConfigError otherwise.
LogLevel parseLogLevel(const std::string& text);
void logLine(LogLevel level, const std::string& message);

// Lets through at most one line per `interval` of one kind of message, so a
// flood (a client opening thousands of bad connections) costs a line a
// second instead of the disk; the next line let through says how many were
// held back. Not thread-safe: one per kind, owned by the thread that logs.
class LogThrottle {
 public:
  explicit LogThrottle(std::chrono::milliseconds interval = std::chrono::seconds(1))
      : interval_(interval) {}
  // True when this line may be written; `suffix` is then "" or
  // " (N similar lines suppressed)".
  bool admit(std::chrono::steady_clock::time_point now, std::string& suffix);

 private:
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point next_{};
  uint64_t suppressed_ = 0;
};

}  // namespace dtrain

#define DTRAIN_LOG(level, expr)                                          \
  do {                                                                   \
    if (static_cast<int>(level) >= static_cast<int>(::dtrain::logLevel())) { \
      std::ostringstream dtrain_log_os_;                                 \
      dtrain_log_os_ << expr;                                            \
      ::dtrain::logLine(level, dtrain_log_os_.str());                    \
    }                                                                    \
  } while (0)

// DTRAIN_LOG through a LogThrottle: the expression is not even evaluated for
// a line that is held back.
#define DTRAIN_LOG_THROTTLED(throttle, level, expr)                                       \
  do {                                                                                    \
    std::string dtrain_log_suffix_;                                                       \
    if (static_cast<int>(level) >= static_cast<int>(::dtrain::logLevel()) &&              \
        (throttle).admit(std::chrono::steady_clock::now(), dtrain_log_suffix_)) {         \
      DTRAIN_LOG(level, expr << dtrain_log_suffix_);                                      \
    }                                                                                     \
  } while (0)

#define DTRAIN_LOG_DEBUG(expr) DTRAIN_LOG(::dtrain::LogLevel::kDebug, expr)
#define DTRAIN_LOG_INFO(expr) DTRAIN_LOG(::dtrain::LogLevel::kInfo, expr)
#define DTRAIN_LOG_WARN(expr) DTRAIN_LOG(::dtrain::LogLevel::kWarn, expr)
#define DTRAIN_LOG_ERROR(expr) DTRAIN_LOG(::dtrain::LogLevel::kError, expr)
