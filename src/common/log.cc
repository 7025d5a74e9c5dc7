#include "common/host.h"
#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "common/error.h"
#include "common/settings.h"

namespace dtrain {
namespace {

std::string checkLogLevel(const std::string& text);

DTRAIN_SETTING_CHECKED(std::string, kLogLevelSetting, "log-level", "DTRAIN_LOG_LEVEL", "info",
                       "Log level of dtrain's own messages: debug, info, warn, error or off.", checkLogLevel);

std::atomic<int> g_level{-1};
std::mutex g_write_mutex;

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kError: return "ERROR";
    case LogLevel::kOff: return "OFF";
  }
  return "?";
}

std::string checkLogLevel(const std::string& text) {
  try {
    parseLogLevel(text);
  } catch (const ConfigError&) {
    return "one of debug, info, warn, error or off";
  }
  return "";
}

}  // namespace

LogLevel parseLogLevel(const std::string& text) {
  if (text == "debug") return LogLevel::kDebug;
  if (text == "info") return LogLevel::kInfo;
  if (text == "warn" || text == "warning") return LogLevel::kWarn;
  if (text == "error") return LogLevel::kError;
  if (text == "off") return LogLevel::kOff;
  throw ConfigError("DTRAIN_LOG_LEVEL='" + text +
                    "' is not a log level; expected debug, info, warn, error or off");
}

LogLevel logLevel() {
  int level = g_level.load(std::memory_order_relaxed);
  if (level < 0) {
    LogLevel parsed = LogLevel::kInfo;
    try {
      parsed = parseLogLevel(kLogLevelSetting.get());
    } catch (const ConfigError& e) {
      std::fprintf(stderr, "[dtrain] %s; using info\n", e.message().c_str());
    }
    level = static_cast<int>(parsed);
    g_level.store(level, std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(level);
}

void setLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

void logLine(LogLevel level, const std::string& message) {
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  int millis = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm_utc{};
  gmtime_r(&secs, &tm_utc);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm_utc);
  int rank = currentRank();
  std::string rank_text = rank >= 0 ? std::to_string(rank) : "-";
  std::lock_guard<std::mutex> lock(g_write_mutex);
  std::fprintf(stderr, "[dtrain %s:%s %s %s.%03dZ] %s\n", hostName().c_str(), rank_text.c_str(),
               levelName(level), stamp, millis, message.c_str());
  std::fflush(stderr);
}

bool LogThrottle::admit(std::chrono::steady_clock::time_point now, std::string& suffix) {
  if (now < next_) {
    ++suppressed_;
    return false;
  }
  suffix = suppressed_ == 0 ? std::string()
                            : " (" + std::to_string(suppressed_) + " similar lines suppressed)";
  suppressed_ = 0;
  next_ = now + interval_;
  return true;
}

}  // namespace dtrain
