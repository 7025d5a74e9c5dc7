#include "common/error.h"

#include <cstring>
#include <atomic>
#include <string>

namespace dtrain {
namespace {
std::atomic<int> g_process_rank{-1};
thread_local int t_thread_rank = -1;

std::string baseName(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

const char* errorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kConfig: return "ConfigError";
    case ErrorKind::kIo: return "IoError";
    case ErrorKind::kTimeout: return "TimeoutError";
    case ErrorKind::kComm: return "CommError";
  }
  return "Error";
}

void setProcessRank(int rank) { g_process_rank = rank; }
void setThreadRank(int rank) { t_thread_rank = rank; }
int currentRank() { return t_thread_rank >= 0 ? t_thread_rank : g_process_rank.load(); }

static std::string formatWhat(ErrorKind kind, const std::string& message,
                              const std::string& file, int line, int rank) {
  std::string what = errorKindName(kind);
  what += " [";
  if (rank >= 0) what += "rank " + std::to_string(rank) + ", ";
  what += file + ":" + std::to_string(line) + "]: " + message;
  return what;
}

Error::Error(ErrorKind kind, const std::string& message, std::source_location where)
    : std::runtime_error(formatWhat(kind, message, baseName(where.file_name()),
                                    static_cast<int>(where.line()), currentRank())),
      kind_(kind),
      message_(message),
      file_(baseName(where.file_name())),
      line_(static_cast<int>(where.line())),
      rank_(currentRank()) {}

std::string errnoString(int err) {
  char buf[256];
  // GNU strerror_r returns the message pointer (maybe not buf).
  const char* text = strerror_r(err, buf, sizeof(buf));
  return std::string(text) + " (errno " + std::to_string(err) + ")";
}

IoError errnoError(const std::string& call, int err, const std::string& context, std::source_location where) {
  // Without a context the call's own text is the only clue to what failed
  // (its arguments name the file); with one, the function's name is enough.
  if (context.empty()) {
    const std::string text = call.find('(') == std::string::npos ? call + "()" : call;
    return IoError(text + " failed: " + errnoString(err), where);
  }
  std::string name = call.substr(0, call.find('('));
  while (!name.empty() && (name.front() == ':' || name.front() == ' ')) name.erase(0, 1);
  return IoError(context + ": " + name + "() failed: " + errnoString(err), where);
}

}  // namespace dtrain
