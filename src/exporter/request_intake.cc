#include "exporter/request_intake.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <optional>
#include <string_view>
#include <utility>

#include "common/error.h"
#include "common/socket.h"

namespace dtrain::exporter {
namespace {

constexpr uint64_t kWakeId = 0;
constexpr size_t kReadChunk = 4096;
constexpr const char* kTimedOut = "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
constexpr const char* kEvicted = "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

bool equalsIgnoringCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// The value of the first header `name` in `head` (the lines after the
// request line), trimmed.
std::optional<std::string_view> headerValue(std::string_view head, std::string_view name) {
  size_t pos = head.find("\r\n");
  while (pos != std::string_view::npos && pos + 2 < head.size()) {
    size_t start = pos + 2;
    size_t end = head.find("\r\n", start);
    std::string_view line = head.substr(start, end == std::string_view::npos ? end : end - start);
    size_t colon = line.find(':');
    if (colon != std::string_view::npos && equalsIgnoringCase(line.substr(0, colon), name)) {
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
      while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
      return value;
    }
    pos = end;
  }
  return std::nullopt;
}

}  // namespace

RequestState requestState(const std::string& bytes, size_t head_max_bytes, size_t body_max_bytes) {
  size_t blank = bytes.find("\r\n\r\n");
  if (blank == std::string::npos) return bytes.size() >= head_max_bytes ? RequestState::kOversize
                                                                         : RequestState::kIncomplete;
  std::string_view head(bytes.data(), blank + 2);
  std::string_view body(bytes.data() + blank + 4, bytes.size() - blank - 4);
  if (headerValue(head, "Transfer-Encoding")) {
    // The last chunk is "0" and an empty trailer; a body that happens to
    // contain that sequence only makes the HTTP layer read the rest of
    // what already arrived, never wait for it.
    bool last = body.starts_with("0\r\n\r\n") || body.ends_with("\r\n0\r\n\r\n");
    if (last) return RequestState::kWhole;
    return body.size() > body_max_bytes ? RequestState::kOversize : RequestState::kIncomplete;
  }
  std::optional<std::string_view> length_text = headerValue(head, "Content-Length");
  if (!length_text) return RequestState::kWhole;
  size_t length = 0;
  auto [end, ec] = std::from_chars(length_text->data(), length_text->data() + length_text->size(), length);
  // A malformed or huge length is the HTTP layer's to refuse (400, 413).
  if (ec != std::errc() || end != length_text->data() + length_text->size()) return RequestState::kWhole;
  if (length > body_max_bytes) return RequestState::kOversize;
  return body.size() >= length ? RequestState::kWhole : RequestState::kIncomplete;
}

RequestIntake::RequestIntake(RequestIntakeOptions options, Handoff handoff)
    : options_(options), handoff_(std::move(handoff)) {
  options_.max_connections = std::max<size_t>(1, options_.max_connections);
}

RequestIntake::~RequestIntake() { stop(); }

void RequestIntake::start() {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) throw errnoError("epoll_create1", errno, "exporter request intake");
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw errnoError("eventfd", errno, "exporter request intake");
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kWakeId;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &event);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = true;
  }
  thread_ = std::thread([this] { run(); });
}

void RequestIntake::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
    if (wake_fd_ >= 0) {
      uint64_t one = 1;
      (void)!::write(wake_fd_, &one, sizeof(one));
    }
  }
  if (thread_.joinable()) thread_.join();
  for (auto& [id, connection] : connections_) ::close(connection.fd);
  connections_.clear();
  reading_order_.clear();
  lingering_order_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto [fd, lingering] : inbox_) ::close(fd);
  inbox_.clear();
  if (epoll_fd_ >= 0) ::close(std::exchange(epoll_fd_, -1));
  if (wake_fd_ >= 0) ::close(std::exchange(wake_fd_, -1));
}

void RequestIntake::add(int fd) { enqueue(fd, false); }

void RequestIntake::linger(int fd) { enqueue(fd, true); }

void RequestIntake::enqueue(int fd, bool lingering) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!running_) {
    ::close(fd);
    return;
  }
  inbox_.emplace_back(fd, lingering);
  // Under the lock: stop() closes the eventfd under it too.
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

RequestIntake::Counters RequestIntake::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

void RequestIntake::run() {
  std::vector<epoll_event> events(256);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!running_) return;
    }
    int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), msUntilNextDeadline());
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == kWakeId) {
        uint64_t count;
        (void)!::read(wake_fd_, &count, sizeof(count));
      } else {
        onReadable(events[i].data.u64);
      }
    }
    admitInbox();
    expire();
  }
}

void RequestIntake::admitInbox() {
  std::vector<std::pair<int, bool>> arrived;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    arrived.swap(inbox_);
  }
  for (auto [fd, lingering] : arrived) admit(fd, lingering);
}

void RequestIntake::admit(int fd, bool lingering) {
  while (connections_.size() >= options_.max_connections) {
    // Served connections go first: only their goodbye is lost.
    auto& order = !lingering_order_.empty() ? lingering_order_ : reading_order_;
    uint64_t oldest = order.front();
    order.pop_front();
    if (!connections_.count(oldest)) continue;
    bool served = connections_[oldest].lingering;
    if (!served) {
      std::lock_guard<std::mutex> lock(mutex_);
      ++counters_.evicted;
    }
    drop(oldest, served ? nullptr : kEvicted);
  }
  Connection connection;
  connection.fd = fd;
  connection.lingering = lingering;
  if (lingering) {
    shutdownSending(fd);
    connection.deadline = Clock::now() + options_.linger;
  } else {
    connection.deadline = Clock::now() + options_.request_deadline;
  }
  uint64_t id = next_id_++;
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP;
  event.data.u64 = id;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
    ::close(fd);
    return;
  }
  connections_.emplace(id, std::move(connection));
  (lingering ? lingering_order_ : reading_order_).push_back(id);
}

void RequestIntake::onReadable(uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& connection = it->second;
  char chunk[kReadChunk];
  const size_t cap = options_.head_max_bytes + options_.body_max_bytes;
  bool hung_up = false;
  // Bounded per wake-up, so that one fast sender cannot keep this thread
  // from the others (level-triggered epoll brings it back).
  for (size_t reads = 0; reads < cap / kReadChunk + 1 && connection.bytes.size() < cap; ++reads) {
    ssize_t n = receiveSome(connection.fd, chunk, sizeof(chunk));
    if (n > 0) {
      if (!connection.lingering) connection.bytes.append(chunk, static_cast<size_t>(n));
      continue;
    }
    hung_up = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    break;
  }
  if (connection.lingering) {
    if (hung_up) drop(id, nullptr);
    return;
  }
  RequestState state = requestState(connection.bytes, options_.head_max_bytes, options_.body_max_bytes);
  if (state == RequestState::kIncomplete) {
    // A request cut short by a hang-up gets no answer: there is no one to read it.
    if (hung_up || connection.bytes.size() >= cap) {
      drop(id, nullptr);
      std::lock_guard<std::mutex> lock(mutex_);
      ++counters_.hung_up;
    }
    return;
  }
  int fd = connection.fd;
  std::string bytes = std::move(connection.bytes);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  connections_.erase(it);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counters_.handed_off;
  }
  handoff_(fd, std::move(bytes));
}

void RequestIntake::expire() {
  const auto now = Clock::now();
  for (auto* order : {&reading_order_, &lingering_order_}) {
    while (!order->empty()) {
      auto it = connections_.find(order->front());
      if (it == connections_.end()) {
        order->pop_front();
        continue;
      }
      if (it->second.deadline > now) break;
      bool served = it->second.lingering;
      order->pop_front();
      if (!served) {
        std::lock_guard<std::mutex> lock(mutex_);
        ++counters_.timed_out;
      }
      drop(it->first, served ? nullptr : kTimedOut);
    }
  }
}

void RequestIntake::drop(uint64_t id, const char* answer) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  int fd = it->second.fd;
  // A courtesy only: never waits, and a full send buffer just loses it.
  if (answer) (void)sendSome(fd, answer, std::char_traits<char>::length(answer));
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  connections_.erase(it);
}

int RequestIntake::msUntilNextDeadline() const {
  // Capped so that a stop() is seen even if its wake-up were lost.
  int wait_ms = 1000;
  for (const auto* order : {&reading_order_, &lingering_order_}) {
    for (uint64_t id : *order) {
      auto it = connections_.find(id);
      if (it == connections_.end()) continue;  // gone; expire() pops it
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(it->second.deadline - Clock::now());
      wait_ms = std::min<int>(wait_ms, static_cast<int>(std::max<int64_t>(0, left.count() + 1)));
      break;
    }
  }
  return wait_ms;
}

}  // namespace dtrain::exporter
