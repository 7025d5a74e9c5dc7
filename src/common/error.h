// dtrain's error model (common/).
//
// Every failure that crosses a layer is a C++ exception derived from
// dtrain::Error. Each carries the kind, the message, the call site
// (file:line) and the rank of the process that raised it, so that a log line
// from any of 1,024 processes says where it came from.
//
//   ConfigError   bad input from a user: flags, env vars, files. CLI exit 2.
//   IoError       the OS said no: sockets, files (wraps errno).
//   TimeoutError  a deadline passed: connect, wait, collective.
//   CommError     a collective or a peer failed (NCCL, Gloo, CUDA, a dead rank).
//
// Foreign return codes are converted at the boundary by one macro per library
// (DTRAIN_CHECK_ERRNO here, DTRAIN_CUDA_CHECK in gpu/cuda_check.h,
// DTRAIN_NCCL_CHECK in comm/nccl/nccl_check.h); nothing else inspects errno
// or ncclResult_t.
#pragma once

#include <source_location>
#include <stdexcept>
#include <string>

namespace dtrain {

enum class ErrorKind { kConfig, kIo, kTimeout, kComm };

const char* errorKindName(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message,
        std::source_location where = std::source_location::current());

  ErrorKind kind() const { return kind_; }
  // The message as given, without the site/rank prefix.
  const std::string& message() const { return message_; }
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  // The rank of the raising process, or -1 when not known (no RANK set).
  int rank() const { return rank_; }

 private:
  ErrorKind kind_;
  std::string message_;
  std::string file_;
  int line_;
  int rank_;
};

#define DTRAIN_DECLARE_ERROR(Name, Kind)                                      \
  class Name : public Error {                                                 \
   public:                                                                    \
    explicit Name(const std::string& message,                                 \
                  std::source_location where = std::source_location::current()) \
        : Error(ErrorKind::Kind, message, where) {}                           \
  };

DTRAIN_DECLARE_ERROR(ConfigError, kConfig)
DTRAIN_DECLARE_ERROR(IoError, kIo)
DTRAIN_DECLARE_ERROR(TimeoutError, kTimeout)
DTRAIN_DECLARE_ERROR(CommError, kComm)
#undef DTRAIN_DECLARE_ERROR

// The rank this process reports in errors and log lines. Set once at start
// from RANK (or by a test thread standing in for a rank: thread-local wins).
void setProcessRank(int rank);
void setThreadRank(int rank);  // -1 clears the override
int currentRank();

// strerror_r wrapped: "Connection refused (errno 111)". For log lines; a
// failure that is thrown goes through errnoError.
std::string errnoString(int err);

// The one conversion of errno into an error: IoError "<context>: <call>()
// failed: <errno text>". `call` may be the call's source text: with a
// context only its function name is kept ("open()"); without one the whole
// text is ("::open(path, O_RDONLY) failed: ..."), the only clue to what
// failed.
IoError errnoError(const std::string& call, int err, const std::string& context = "",
                   std::source_location where = std::source_location::current());

}  // namespace dtrain

// Converts a failing libc/syscall return (-1 with errno) into IoError naming
// the call, the errno text, the rank and, when given, what was being done:
//   DTRAIN_CHECK_ERRNO(::open(p, O_RDONLY), "cannot open checkpoint " + path)
//   -> IoError "cannot open checkpoint X: open() failed: No such file or
//      directory (errno 2)"
// Evaluates to the call's result. Calls that report failure otherwise
// (fopen's nullptr, posix_spawn's return value) throw errnoError directly.
#define DTRAIN_CHECK_ERRNO(call, ...)                                         \
  ([&]() {                                                                    \
    auto dtrain_rc_ = (call);                                                 \
    if (dtrain_rc_ == -1) {                                                   \
      int dtrain_errno_ = errno;                                              \
      throw ::dtrain::errnoError(#call, dtrain_errno_ __VA_OPT__(, ) __VA_ARGS__); \
    }                                                                         \
    return dtrain_rc_;                                                        \
  }())
