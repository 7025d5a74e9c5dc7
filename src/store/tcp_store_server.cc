// TcpStoreServer: the event loop and the lifecycle of connections (accept,
// the connection limit, the HELLO and idle timeouts, close). Reading,
// executing and writing are in tcp_store_server_io.cc; the design is in
// tcp_store_server_impl.h.
#include <malloc.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "common/error.h"
#include "common/text.h"
#include "store/tcp_store_server_impl.h"

namespace dtrain {
namespace {

constexpr uint64_t kListenTag = 0;
constexpr uint64_t kWakeTag = 1;
// Bounds one loop turn: a burst of thousands of connects, or of deferred
// requests timing out together, is spread over turns so the clients already
// served keep getting answers.
constexpr int kAcceptsPerTurn = 256;
constexpr size_t kExpiredKeysPerTurn = 65536;
// After accept() runs out of descriptors, retry this much later instead of
// spinning on the still-readable listening socket.
constexpr std::chrono::milliseconds kAcceptPause{100};
// A refused client gets this long to read the reason before its socket is
// closed; at most kMaxLingering wait at once (each holds a descriptor), and a
// connection beyond that is sent the reason and closed at once.
constexpr std::chrono::milliseconds kRefusalLinger{2000};
constexpr size_t kMaxLingering = 64;
// Freed heap is handed back to the OS (malloc_trim) once this much piled up,
// at most once per kTrimInterval: closing thousands of connections should
// bring the resident size back down, not leave it at its peak.
constexpr size_t kTrimAfterFreedBytes = size_t{1} << 20;
constexpr std::chrono::seconds kTrimInterval{1};

size_t connectionLimit(size_t requested) {
  if (requested > 0) return requested;
  const uint64_t files = raiseOpenFileLimit();
  const uint64_t headroom = std::max<uint64_t>(64, files / 8);
  return files > headroom + 1 ? static_cast<size_t>(files - headroom) : 1;
}

std::chrono::milliseconds sweepInterval(const TcpStoreServerOptions& options) {
  std::chrono::milliseconds shortest = kRefusalLinger;
  if (options.hello_timeout.count() > 0) shortest = std::min(shortest, options.hello_timeout);
  if (options.idle_timeout.count() > 0) shortest = std::min(shortest, options.idle_timeout / 4);
  return std::clamp<std::chrono::milliseconds>(shortest / 4, std::chrono::milliseconds(10),
                                               std::chrono::seconds(1));
}

}  // namespace

TcpStoreServer::Impl::Impl(const TcpStoreServerOptions& options)
    : options_(options),
      max_connections_(connectionLimit(options.max_connections)),
      // A HELLO carries the token, so a server with a long token reads one.
      max_hello_frame_bytes_(static_cast<uint32_t>(std::max<size_t>(
          kStoreMaxHelloFrameBytes, options.token.size() + 64))),
      read_buffer_(256 << 10),
      handler_(options.max_keys_per_request),
      sweep_interval_(sweepInterval(options)) {
  raiseOpenFileLimit();
  listen_fd_ = listenTcp(options.bind_address, options.port, SOMAXCONN);
  port_ = localPort(listen_fd_.get());
  where_ = hostPortText(options.bind_address, port_);
  epoll_fd_.reset(DTRAIN_CHECK_ERRNO(epoll_create1(EPOLL_CLOEXEC)));
  wake_fd_.reset(DTRAIN_CHECK_ERRNO(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)));
  epoll_event listen_event{EPOLLIN, {.u64 = kListenTag}};
  DTRAIN_CHECK_ERRNO(epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, listen_fd_.get(), &listen_event));
  epoll_event wake_event{EPOLLIN, {.u64 = kWakeTag}};
  DTRAIN_CHECK_ERRNO(epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &wake_event));
  DTRAIN_LOG_DEBUG("store server listening on " << where_
                   << (options.token.empty() ? "" : " (token required)") << ", at most "
                   << max_connections_ << " connections");
  thread_ = std::thread([this] { run(); });
}

TcpStoreServer::Impl::~Impl() {
  stopping_ = true;
  uint64_t one = 1;
  if (::write(wake_fd_.get(), &one, sizeof(one)) < 0) {
    DTRAIN_LOG_WARN("store server " << where_ << ": waking the loop failed: " << errnoString(errno));
  }
  thread_.join();
  // Connections close here: clients still waiting see the connection drop.
}

void TcpStoreServer::Impl::run() {
  std::vector<epoll_event> events(256);
  try {
    while (!stopping_) turn(events);
  } catch (const std::exception& e) {
    const auto* error = dynamic_cast<const Error*>(&e);
    const std::string why = "store server " + where_ + " stopped serving: " + (error ? error->message() : e.what());
    DTRAIN_LOG_ERROR(why);
    std::lock_guard<std::mutex> lock(failure_mutex_);
    failure_ = why;
    listen_fd_.reset();  // new clients are refused rather than left waiting
  }
  connections_.clear();
  num_clients_ = 0;
}

void TcpStoreServer::Impl::turn(std::vector<epoll_event>& events) {
  if (options_.loop_hook) options_.loop_hook();
  int n = epoll_wait(epoll_fd_.get(), events.data(), static_cast<int>(events.size()),
                     epollTimeoutMillis());
  if (n < 0) {
    if (errno == EINTR) return;
    throw errnoError("epoll_wait", errno);
  }
  for (int i = 0; i < n; ++i) {
    uint64_t tag = events[i].data.u64;
    if (tag == kWakeTag) continue;  // stopping_ is checked by the loop
    if (tag == kListenTag) {
      acceptClients();
      continue;
    }
    auto it = connections_.find(tag);
    if (it == connections_.end()) continue;  // closed earlier in this batch
    if (!serviceConnection(*it->second, events[i].events)) closeConnection(tag);
    drainReady();
  }
  serveBacklog();
  const SteadyTime now = std::chrono::steady_clock::now();
  deliver(handler_.expire(now, kExpiredKeysPerTurn));
  drainReady();
  sweep(now);
  resumeAcceptingIfDue();
  giveMemoryBackIfDue(now);
}

std::string TcpStoreServer::Impl::failure() const {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  return failure_;
}

int TcpStoreServer::Impl::epollTimeoutMillis() const {
  if (!backlog_.empty()) return 0;
  std::optional<SteadyTime> wake = handler_.nextDeadline();
  if (!accepting_ && (!wake || accept_resume_at_ < *wake)) wake = accept_resume_at_;
  if (!connections_.empty() && (!wake || next_sweep_ < *wake)) wake = next_sweep_;
  if (!wake) return -1;
  auto left = std::chrono::ceil<std::chrono::milliseconds>(*wake - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, INT_MAX));
}

void TcpStoreServer::Impl::acceptClients() {
  for (int accepted = 0; accepted < kAcceptsPerTurn; ++accepted) {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    int fd = accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&address), &length,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == EINTR || err == ECONNABORTED) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      DTRAIN_LOG_THROTTLED(accept_log_, LogLevel::kWarn,
                           "store server " << where_ << ": accept4() failed with "
                           << connections_.size() << " connections open: " << errnoString(err)
                           << "; pausing new connections for " << kAcceptPause.count() << " ms");
      DTRAIN_CHECK_ERRNO(epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, listen_fd_.get(), nullptr));
      accepting_ = false;
      accept_resume_at_ = std::chrono::steady_clock::now() + kAcceptPause;
      return;
    }
    admit(FileDescriptor(fd),
          socketAddressText(reinterpret_cast<sockaddr*>(&address), length));
  }
}

bool TcpStoreServer::Impl::evictOldestStranger(const std::string& newcomer) {
  while (!accept_order_.empty()) {
    const ClientId id = accept_order_.front();
    accept_order_.pop_front();
    auto it = connections_.find(id);
    if (it == connections_.end() || it->second->greeted || it->second->refused) continue;
    DTRAIN_LOG_THROTTLED(limit_log_, LogLevel::kWarn,
                         "store server " << where_ << ": at its limit of " << max_connections_
                         << " connections; closed " << it->second->peer << ", the oldest that has not said HELLO, "
                         << "to make room for " << newcomer);
    closeConnection(id);
    return true;
  }
  return false;
}

void TcpStoreServer::Impl::admit(FileDescriptor socket, std::string peer) {
  bool over_limit = connections_.size() - num_refused_ >= max_connections_;
  // Room is made by dropping a stranger that has not authenticated, never
  // by refusing a newcomer that may be a worker about to say HELLO.
  if (over_limit && evictOldestStranger(peer)) over_limit = false;
  const std::string why = over_limit ? "the store server at " + where_ + " is at its limit of " +
                                           std::to_string(max_connections_) +
                                           " connections (TcpStoreServerOptions::max_connections); "
                                           "try again later, or close idle clients"
                                     : std::string();
  if (over_limit && num_refused_ >= kMaxLingering) {
    // No descriptor to spare for lingering: the reason goes into the fresh
    // socket's empty send buffer, and the peer reads it before the close.
    const std::string refusal = FrameWriter(ReplyStatus::kRefused)
                                    .u8(static_cast<uint8_t>(RefusalReason::kTooManyConnections))
                                    .bytes(why)
                                    .finish();
    (void)::send(socket.get(), refusal.data(), refusal.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    DTRAIN_LOG_THROTTLED(limit_log_, LogLevel::kWarn,
                         "store server " << where_ << ": refused " << peer << ": " << why);
    return;  // closing `socket`
  }
  try {
    setNoDelay(socket.get());
  } catch (const IoError& e) {
    DTRAIN_LOG_DEBUG("store server " << where_ << ": " << peer << ": " << e.message());
  }
  const ClientId id = next_id_++;
  epoll_event event{EPOLLIN | EPOLLRDHUP, {.u64 = id}};
  DTRAIN_CHECK_ERRNO(epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, socket.get(), &event));
  auto owned = std::make_unique<Connection>(id, std::move(socket), std::move(peer),
                                            max_hello_frame_bytes_, std::chrono::steady_clock::now());
  Connection& c = *owned;
  connections_.emplace(id, std::move(owned));
  num_clients_.fetch_add(1, std::memory_order_relaxed);
  if (!over_limit) {
    accept_order_.push_back(id);
    return;
  }
  // The reason is sent before the HELLO arrives; the HELLO is read and
  // dropped while the refusal lingers, so the client reads the reason
  // instead of a reset.
  if (!refuse(c, RefusalReason::kTooManyConnections, why) || !updateInterest(c)) closeConnection(id);
}

void TcpStoreServer::Impl::resumeAcceptingIfDue() {
  if (accepting_ || std::chrono::steady_clock::now() < accept_resume_at_) return;
  epoll_event event{EPOLLIN, {.u64 = kListenTag}};
  DTRAIN_CHECK_ERRNO(epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, listen_fd_.get(), &event));
  accepting_ = true;
}

void TcpStoreServer::Impl::sweep(SteadyTime now) {
  if (now < next_sweep_) return;
  next_sweep_ = now + sweep_interval_;
  const auto hello_timeout = options_.hello_timeout;
  const auto idle_timeout = options_.idle_timeout;
  std::vector<ClientId> doomed;
  for (auto& [id, owned] : connections_) {
    Connection& c = *owned;
    if (c.refused) {
      if (now - c.last_active >= kRefusalLinger) doomed.push_back(id);
      continue;
    }
    if (!c.greeted) {
      if (hello_timeout.count() > 0 && now - c.accepted_at >= hello_timeout) {
        DTRAIN_LOG_THROTTLED(timeout_log_, LogLevel::kWarn,
                             "store server " << where_ << ": closed " << c.peer
                             << ": no HELLO within " << secondsText(hello_timeout) << " s"
                             << " of connecting (TcpStoreServerOptions::hello_timeout)");
        doomed.push_back(id);
      }
      continue;
    }
    if (idle_timeout.count() == 0 || handler_.isDeferred(id)) continue;
    const auto quiet = now - c.last_active;
    // A quarter in, note how many segments the peer had sent; at the timeout,
    // any more (a keep-alive probe is one) shows the peer is alive and merely
    // quiet. The window spans several probe intervals of a TcpStore client.
    if (quiet >= idle_timeout / 4 && !c.segments_in) c.segments_in = tcpSegmentsIn(c.fd.get());
    if (quiet < idle_timeout) continue;
    std::optional<uint32_t> segments = tcpSegmentsIn(c.fd.get());
    if (segments && c.segments_in && *segments != *c.segments_in) {
      c.last_active = now;
      c.segments_in.reset();
      continue;
    }
    DTRAIN_LOG_THROTTLED(timeout_log_, LogLevel::kWarn,
                         "store server " << where_ << ": closed " << c.peer << ": idle for "
                         << secondsText(idle_timeout) << " s"
                         << " with no request pending and no TCP keep-alive from the peer "
                            "(TcpStoreServerOptions::idle_timeout)");
    doomed.push_back(id);
  }
  for (ClientId id : doomed) closeConnection(id);
  // Forget the greeted and the closed: only strangers are ever evicted.
  std::erase_if(accept_order_, [this](ClientId id) {
    auto it = connections_.find(id);
    return it == connections_.end() || it->second->greeted || it->second->refused;
  });
}

void TcpStoreServer::Impl::serveBacklog() {
  std::vector<ClientId> due;
  due.swap(backlog_);
  for (ClientId id : due) {
    auto it = connections_.find(id);
    if (it == connections_.end()) continue;
    Connection& c = *it->second;
    c.backlogged = false;
    if (!processFrames(c) || !updateInterest(c)) closeConnection(id);
    drainReady();
  }
}

void TcpStoreServer::Impl::closeConnection(ClientId id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = *it->second;
  if (c.refused) --num_refused_;
  buffered_bytes_ -= c.accounted_bytes;
  freed_since_trim_ += c.decoder.capacityBytes() + c.out.capacity() + sizeof(Connection);
  handler_.forget(id);
  connections_.erase(it);  // closing the fd also removes it from the epoll set
  num_clients_.fetch_sub(1, std::memory_order_relaxed);
}

void TcpStoreServer::Impl::giveMemoryBackIfDue(SteadyTime now) {
  if (freed_since_trim_ < kTrimAfterFreedBytes || now < next_trim_) return;
  // Buffers above the mmap threshold go back on free; the many small ones of
  // thousands of connections stay in the heap until trimmed.
  malloc_trim(0);
  freed_since_trim_ = 0;
  next_trim_ = now + kTrimInterval;
}

TcpStoreServer::TcpStoreServer(const TcpStoreServerOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}
TcpStoreServer::~TcpStoreServer() = default;
uint16_t TcpStoreServer::port() const { return impl_->port(); }
size_t TcpStoreServer::numClients() const { return impl_->numClients(); }
std::string TcpStoreServer::failure() const { return impl_->failure(); }

}  // namespace dtrain
