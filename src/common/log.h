// A small logger: "[dtrain <host>:<rank> <LEVEL> <time>] message" on stderr.
// The level comes from DTRAIN_LOG_LEVEL (debug|info|warn|error, default
// info). Lines from concurrent threads never interleave.
#pragma once

#include <sstream>
#include <string>

namespace dtrain {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

LogLevel logLevel();
void setLogLevel(LogLevel level);
// Parses debug|info|warn|warning|error|off; throws ConfigError otherwise.
LogLevel parseLogLevel(const std::string& text);
void logLine(LogLevel level, const std::string& message);

}  // namespace dtrain

#define DTRAIN_LOG(level, expr)                                          \
  do {                                                                   \
    if (static_cast<int>(level) >= static_cast<int>(::dtrain::logLevel())) { \
      std::ostringstream dtrain_log_os_;                                 \
      dtrain_log_os_ << expr;                                            \
      ::dtrain::logLine(level, dtrain_log_os_.str());                    \
    }                                                                    \
  } while (0)

#define DTRAIN_LOG_DEBUG(expr) DTRAIN_LOG(::dtrain::LogLevel::kDebug, expr)
#define DTRAIN_LOG_INFO(expr) DTRAIN_LOG(::dtrain::LogLevel::kInfo, expr)
#define DTRAIN_LOG_WARN(expr) DTRAIN_LOG(::dtrain::LogLevel::kWarn, expr)
#define DTRAIN_LOG_ERROR(expr) DTRAIN_LOG(::dtrain::LogLevel::kError, expr)
