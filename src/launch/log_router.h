// LogRouter (launch/): one thread that reads every worker's stdout and stderr
// pipes with poll() and sends each line where it belongs. No torch, no CUDA.
//
// Contract:
// - Console output is line-buffered: every complete line is written to the
//   console as prefix + line + "\n" within one write() made under a
//   process-wide mutex, so lines of different workers never interleave
//   mid-line. A partial last line is flushed (with a "\n") at EOF; a line
//   longer than kMaxLineBytes is cut there.
// - Worker stdout goes to the router's console stdout, stderr to its console
//   stderr, each only when the worker's *_to_console says so.
// - A stream with a file name gets a raw copy of everything the worker wrote
//   (no prefix, byte for byte), whether or not it also goes to the console.
// - The last kTailLines stderr lines of each worker are kept in memory.
// - A console that went away (EPIPE) is dropped silently; files go on.
// - Carriage-return updates (a progress bar: "\r...", no newline yet) reach
//   the console at once as "\r" + prefix + the text after the last "\r",
//   for the worker's own terminal's effect; the newline that ends them
//   ends the bar's line, and any other console line first ends an open bar.
//   A complete line shows the text after its last "\r". Files get the raw
//   bytes; tails keep whole lines only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launch/launch_config.h"

namespace dtrain {

// torchrun's TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE spelling (Python's
// string.Template): ${rank}, ${local_rank}, ${role_name}, ${host}, the same
// without braces, and $$ for a literal $. Unknown names stay as written.
// An empty template means kDefaultLinePrefixTemplate.
inline constexpr const char* kDefaultLinePrefixTemplate = "[${host}:${rank}]: ";

// Set to 1 in a worker's environment when its stderr reaches the launcher's
// terminal through the router (dtrain train then draws its progress bar).
inline constexpr const char* kProgressTerminalVariable = "DTRAIN_PROGRESS_TERMINAL";
std::string formatLinePrefix(const std::string& prefix_template, int rank, int local_rank,
                             const std::string& role_name, const std::string& host);

// The StreamSet for `local_rank`: its own entry, else the entry for every
// rank (key kAllLocalRanks), else kNone.
inline constexpr int kAllLocalRanks = -1;
StreamSet streamSetFor(const std::map<int, StreamSet>& sets, int local_rank);
bool includesStdout(StreamSet set);
bool includesStderr(StreamSet set);

struct WorkerStreams {
  int stdout_fd = -1;  // pipe read ends; the router owns them from addWorker()
  int stderr_fd = -1;
  std::string prefix;  // console line prefix
  bool stdout_to_console = true;
  bool stderr_to_console = true;
  std::string stdout_file;  // raw copy; "" = none. Parent folders are created.
  std::string stderr_file;
};

class LogRouter {
 public:
  static constexpr size_t kTailLines = 20;
  static constexpr size_t kMaxLineBytes = 64 * 1024;

  explicit LogRouter(int console_stdout = 1, int console_stderr = 2);
  ~LogRouter();  // finish(0)
  LogRouter(const LogRouter&) = delete;
  LogRouter& operator=(const LogRouter&) = delete;

  // Before start(). Returns the worker's id (0, 1, ...). Takes ownership of
  // the fds even when it throws (IoError: a log file cannot be opened).
  int addWorker(WorkerStreams streams);
  void start();
  // Waits until both of worker `id`'s streams reached EOF (true) or the
  // timeout passed (false).
  bool waitForEof(int id, std::chrono::milliseconds timeout);
  // Waits up to `timeout` for every stream's EOF (a grandchild may hold a
  // pipe open for good), then stops the thread, flushes partial lines and
  // closes every fd. Idempotent.
  void finish(std::chrono::milliseconds timeout);
  std::vector<std::string> stderrTail(int id) const;
  std::optional<std::chrono::steady_clock::time_point> firstOutputTime() const;

 private:
  struct Stream {
    int fd = -1;
    int worker = 0;
    bool is_stderr = false;
    bool to_console = false;
    int file_fd = -1;
    std::string pending;  // bytes after the last complete line
    bool eof = false;
  };
  struct WorkerLog {
    std::string prefix;
    std::deque<std::string> tail;  // GUARDED_BY(mutex_)
    int open_streams = 0;          // GUARDED_BY(mutex_)
  };

  void run();
  void readStream(Stream& stream, char* buf, size_t size);
  // Routes the lines in stream.pending[0, end) (each ended by '\n', the
  // last one possibly not) and drops them from pending.
  void emitLines(Stream& stream, size_t end);
  // A carriage-return update left in stream.pending after its last
  // newline: on the console at once, dropped from pending.
  void showCarriageReturn(Stream& stream);
  void closeStream(Stream& stream);
  // The console lines of `stream` (each shown as a terminal shows it: the
  // text after its last '\r', had_cr saying there was one), or with
  // `transient` one carriage-return update, composed with the open bar.
  void writeConsole(const Stream& stream, const std::vector<std::pair<std::string_view, bool>>& lines,
                    bool transient = false);

  const int console_stdout_;
  const int console_stderr_;
  std::vector<Stream> streams_;  // the thread's alone between start() and finish()
  mutable std::mutex mutex_;
  std::condition_variable eof_cv_;
  std::vector<WorkerLog> workers_;
  int open_streams_ = 0;  // GUARDED_BY(mutex_)
  std::optional<std::chrono::steady_clock::time_point> first_output_;  // GUARDED_BY(mutex_)
  std::atomic<bool> console_broken_{false};
  std::atomic<bool> stop_{false};
  int wake_read_ = -1;
  int wake_write_ = -1;
  std::thread thread_;
  bool started_ = false;
  bool finished_ = false;
};

}  // namespace dtrain
