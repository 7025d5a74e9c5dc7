#include "launch/log_router.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <filesystem>

#include "common/error.h"
#include "common/log.h"

namespace dtrain {
namespace {

// One lock for every router in the process: lines of two groups (or of a
// router and a test) written to the same console never interleave either.
std::mutex& consoleMutex() {
  static std::mutex mutex;
  return mutex;
}

// The stream whose carriage-return line (a progress bar) is on the console,
// null for none. Guarded by consoleMutex().
const void* open_bar = nullptr;

// Writes all of `text`; false when the fd refuses (EPIPE, EBADF, ...).
bool writeAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {  // a console someone made non-blocking
        pollfd out{fd, POLLOUT, 0};
        ::poll(&out, 1, 100);
        continue;
      }
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

int openLogFile(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) throw IoError("cannot create the folder of log file " + path + ": " + ec.message());
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw errnoError("open", errno, "cannot open log file " + path);
  return fd;
}

bool isNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool isNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

std::string formatLinePrefix(const std::string& prefix_template, int rank, int local_rank,
                             const std::string& role_name, const std::string& host) {
  const std::string& text = prefix_template.empty() ? std::string(kDefaultLinePrefixTemplate) : prefix_template;
  const std::map<std::string, std::string> values = {
      {"rank", std::to_string(rank)},
      {"local_rank", std::to_string(local_rank)},
      {"role_name", role_name},
      {"host", host}};
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '$' || i + 1 == text.size()) {
      out += text[i++];
      continue;
    }
    if (text[i + 1] == '$') {
      out += '$';
      i += 2;
      continue;
    }
    size_t name_begin = i + 1, name_end = name_begin, next = i + 1;
    if (text[i + 1] == '{') {
      size_t close = text.find('}', i + 2);
      if (close != std::string::npos) {
        name_begin = i + 2;
        name_end = close;
        next = close + 1;
      }
    } else if (isNameStart(text[i + 1])) {
      while (name_end < text.size() && isNameChar(text[name_end])) ++name_end;
      next = name_end;
    }
    auto value = values.find(text.substr(name_begin, name_end - name_begin));
    if (name_end > name_begin && value != values.end()) {
      out += value->second;
      i = next;
    } else {
      out += text[i++];  // not a placeholder we know: keep it as written
    }
  }
  return out;
}

StreamSet streamSetFor(const std::map<int, StreamSet>& sets, int local_rank) {
  auto own = sets.find(local_rank);
  if (own != sets.end()) return own->second;
  auto all = sets.find(kAllLocalRanks);
  return all != sets.end() ? all->second : StreamSet::kNone;
}

bool includesStdout(StreamSet set) { return set == StreamSet::kStdout || set == StreamSet::kBoth; }
bool includesStderr(StreamSet set) { return set == StreamSet::kStderr || set == StreamSet::kBoth; }

LogRouter::LogRouter(int console_stdout, int console_stderr)
    : console_stdout_(console_stdout), console_stderr_(console_stderr) {
  int fds[2];
  DTRAIN_CHECK_ERRNO(::pipe2(fds, O_CLOEXEC | O_NONBLOCK));
  wake_read_ = fds[0];
  wake_write_ = fds[1];
}

LogRouter::~LogRouter() {
  try {
    finish(std::chrono::milliseconds(0));
  } catch (const std::exception& e) {
    DTRAIN_LOG_ERROR("log router: " << e.what());
  }
}

int LogRouter::addWorker(WorkerStreams spec) {
  const int id = static_cast<int>(workers_.size());
  WorkerLog log;
  log.prefix = spec.prefix;
  log.open_streams = 2;
  workers_.push_back(std::move(log));
  for (bool is_stderr : {false, true}) {
    Stream stream;
    stream.fd = is_stderr ? spec.stderr_fd : spec.stdout_fd;
    stream.worker = id;
    stream.is_stderr = is_stderr;
    stream.to_console = is_stderr ? spec.stderr_to_console : spec.stdout_to_console;
    streams_.push_back(std::move(stream));
    std::lock_guard<std::mutex> lock(mutex_);
    ++open_streams_;
  }
  // Both streams are registered first, so a throwing open still leaves every
  // fd owned (and closed by finish()).
  Stream& out = streams_[streams_.size() - 2];
  Stream& err = streams_[streams_.size() - 1];
  if (!spec.stdout_file.empty()) out.file_fd = openLogFile(spec.stdout_file);
  if (!spec.stderr_file.empty()) err.file_fd = openLogFile(spec.stderr_file);
  return id;
}

void LogRouter::start() {
  if (started_ || finished_) return;
  started_ = true;
  thread_ = std::thread([this] { run(); });
}

void LogRouter::run() {
  // Signals meant for the launcher go to its other threads; a write to a
  // console that went away then fails with EPIPE here instead of killing us.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  std::vector<char> buf(64 * 1024);
  std::vector<pollfd> fds;
  std::vector<size_t> which;
  while (!stop_.load()) {
    fds.assign(1, pollfd{wake_read_, POLLIN, 0});
    which.clear();
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (streams_[i].eof) continue;
      fds.push_back(pollfd{streams_[i].fd, POLLIN, 0});
      which.push_back(i);
    }
    if (which.empty()) break;
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      DTRAIN_LOG_ERROR("log router: poll failed: " << errnoString(errno));
      break;
    }
    if (fds[0].revents != 0) {
      char drain[64];
      while (::read(wake_read_, drain, sizeof(drain)) > 0) {
      }
    }
    for (size_t k = 1; k < fds.size(); ++k) {
      if (fds[k].revents != 0) readStream(streams_[which[k - 1]], buf.data(), buf.size());
    }
  }
}

void LogRouter::readStream(Stream& stream, char* buf, size_t size) {
  ssize_t n = ::read(stream.fd, buf, size);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {  // EOF, or an error that ends the stream just the same
    closeStream(stream);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!first_output_) first_output_ = std::chrono::steady_clock::now();
  }
  if (stream.file_fd >= 0 && !writeAll(stream.file_fd, buf, static_cast<size_t>(n))) {
    DTRAIN_LOG_WARN("log router: writing a worker log file failed: " << errnoString(errno)
                    << "; that file is no longer written");
    ::close(stream.file_fd);
    stream.file_fd = -1;
  }
  stream.pending.append(buf, static_cast<size_t>(n));
  size_t last_newline = stream.pending.rfind('\n');
  if (last_newline != std::string::npos) {
    emitLines(stream, last_newline + 1);
  } else if (stream.pending.size() >= kMaxLineBytes) {
    emitLines(stream, stream.pending.size());
  }
  showCarriageReturn(stream);
}

void LogRouter::showCarriageReturn(Stream& stream) {
  const size_t cr = stream.pending.rfind('\r');
  if (!stream.to_console || cr == std::string::npos || cr + 1 == stream.pending.size()) return;
  writeConsole(stream, {{std::string_view(stream.pending).substr(cr + 1), true}}, /*transient=*/true);
  stream.pending.clear();
}

void LogRouter::emitLines(Stream& stream, size_t end) {
  std::vector<std::pair<std::string_view, bool>> console;
  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < end) {
    size_t newline = stream.pending.find('\n', begin);
    size_t line_end = (newline == std::string::npos || newline >= end) ? end : newline;
    std::string_view line(stream.pending.data() + begin, line_end - begin);
    if (stream.to_console) {
      const size_t cr = line.rfind('\r');
      console.emplace_back(cr == std::string_view::npos ? line : line.substr(cr + 1), cr != std::string_view::npos);
    }
    if (stream.is_stderr) lines.emplace_back(line);
    begin = line_end + 1;
  }
  if (!console.empty()) writeConsole(stream, console);
  stream.pending.erase(0, end);
  if (!lines.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& tail = workers_[stream.worker].tail;
    for (auto& line : lines) {
      tail.push_back(std::move(line));
      if (tail.size() > kTailLines) tail.pop_front();
    }
  }
}

void LogRouter::writeConsole(const Stream& stream, const std::vector<std::pair<std::string_view, bool>>& lines,
                             bool transient) {
  const int fd = stream.is_stderr ? console_stderr_ : console_stdout_;
  if (fd < 0 || console_broken_.load()) return;
  const std::string& prefix = workers_[stream.worker].prefix;
  std::lock_guard<std::mutex> lock(consoleMutex());
  std::string text;
  bool first = true;
  for (const auto& [line, had_cr] : lines) {
    if (open_bar == &stream && first) {
      // This stream's bar is on the console: an update or a line that
      // redraws it overwrites it, its newline ends it, other text goes below.
      if (transient || had_cr) {
        text.append("\r").append(prefix).append(line);
      } else if (!line.empty()) {
        text.append("\n").append(prefix).append(line);
      }
    } else {
      if (open_bar != nullptr && first) text.push_back('\n');  // another worker's bar stays, ended
      if (transient) text.push_back('\r');
      text.append(prefix).append(line);
    }
    if (!transient) text.push_back('\n');
    first = false;
  }
  open_bar = transient ? &stream : nullptr;
  if (!writeAll(fd, text.data(), text.size())) console_broken_.store(true);
}

void LogRouter::closeStream(Stream& stream) {
  if (stream.eof) return;
  if (!stream.pending.empty()) emitLines(stream, stream.pending.size());
  {
    std::lock_guard<std::mutex> lock(consoleMutex());
    if (open_bar == &stream) {  // a bar with no newline after it: end its line
      open_bar = nullptr;
      const int fd = stream.is_stderr ? console_stderr_ : console_stdout_;
      if (fd >= 0 && !console_broken_.load() && !writeAll(fd, "\n", 1)) console_broken_.store(true);
    }
  }
  if (stream.fd >= 0) ::close(stream.fd);
  stream.fd = -1;
  if (stream.file_fd >= 0) ::close(stream.file_fd);
  stream.file_fd = -1;
  stream.eof = true;
  std::lock_guard<std::mutex> lock(mutex_);
  --workers_[stream.worker].open_streams;
  --open_streams_;
  eof_cv_.notify_all();
}

bool LogRouter::waitForEof(int id, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (id < 0 || id >= static_cast<int>(workers_.size())) return true;
  if (!started_ || finished_) return workers_[id].open_streams == 0;
  return eof_cv_.wait_for(lock, timeout, [&] { return workers_[id].open_streams == 0; });
}

void LogRouter::finish(std::chrono::milliseconds timeout) {
  if (finished_) return;
  if (started_) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      eof_cv_.wait_for(lock, timeout, [&] { return open_streams_ == 0; });
    }
    stop_.store(true);
    char wake = 1;
    ssize_t ignored = ::write(wake_write_, &wake, 1);
    (void)ignored;
    thread_.join();
  }
  finished_ = true;
  for (auto& stream : streams_) {
    if (stream.eof) continue;
    // Whatever a lingering writer left in the pipe still reaches its place.
    char buf[4096];
    ssize_t n;
    while (stream.fd >= 0 && (n = ::read(stream.fd, buf, sizeof(buf))) > 0) {
      if (stream.file_fd >= 0) writeAll(stream.file_fd, buf, static_cast<size_t>(n));
      stream.pending.append(buf, static_cast<size_t>(n));
    }
    closeStream(stream);
  }
  ::close(wake_read_);
  ::close(wake_write_);
  wake_read_ = wake_write_ = -1;
}

std::vector<std::string> LogRouter::stderrTail(int id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (id < 0 || id >= static_cast<int>(workers_.size())) return {};
  return {workers_[id].tail.begin(), workers_[id].tail.end()};
}

std::optional<std::chrono::steady_clock::time_point> LogRouter::firstOutputTime() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return first_output_;
}

}  // namespace dtrain
