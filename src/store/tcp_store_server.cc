// TcpStoreServer: one event-loop thread over epoll (level-triggered) and
// non-blocking sockets. Requests are executed by StoreRequestHandler; this
// file only moves bytes, greets connections and closes bad ones.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/error.h"
#include "common/log.h"
#include "store/request_handler.h"
#include "common/socket.h"
#include "store/tcp_store.h"
#include "store/wire.h"

namespace dtrain {
namespace {

constexpr uint64_t kListenTag = 0;
constexpr uint64_t kWakeTag = 1;
constexpr size_t kReadChunkBytes = 64 * 1024;
// Bounds what one busy connection reads per event, so others still get turns.
constexpr size_t kMaxReadPerEvent = 1 << 20;
// After accept() runs out of descriptors, retry this much later instead of
// spinning on the still-readable listening socket.
constexpr std::chrono::milliseconds kAcceptPause{100};

// Compares in time independent of where the tokens differ.
bool tokensMatch(std::string_view expected, std::string_view given) {
  size_t diff = expected.size() ^ given.size();
  for (size_t i = 0; i < expected.size(); ++i) {
    diff |= static_cast<unsigned char>(expected[i]) ^
            static_cast<unsigned char>(i < given.size() ? given[i] : 0);
  }
  return diff == 0;
}

}  // namespace

class TcpStoreServer::Impl {
 public:
  explicit Impl(const TcpStoreServerOptions& options);
  ~Impl();

  uint16_t port() const { return port_; }
  size_t numClients() const { return num_clients_.load(std::memory_order_relaxed); }
  std::string failure() const;

 private:
  struct Connection {
    Connection(ClientId id, FileDescriptor fd, std::string peer, uint32_t max_frame_bytes)
        : id(id), fd(std::move(fd)), peer(std::move(peer)), decoder(max_frame_bytes) {}
    ClientId id;
    FileDescriptor fd;
    std::string peer;  // "ip:port", for log lines
    FrameDecoder decoder;
    std::string out;   // reply bytes the socket has not taken yet
    size_t out_offset = 0;
    bool greeted = false;
    bool refused = false;  // close once the refusal is flushed
    uint32_t interest = EPOLLIN | EPOLLRDHUP;
    bool outPending() const { return out_offset < out.size(); }
  };

  void run();
  int epollTimeoutMillis() const;
  void acceptClients();
  void resumeAcceptingIfDue();
  // Each returns false when the connection must be closed.
  bool serviceConnection(Connection& c, uint32_t events);
  bool readAvailable(Connection& c);
  bool processFrames(Connection& c);
  bool greet(Connection& c, std::string_view payload);
  bool send(Connection& c, std::string frame);
  bool flush(Connection& c);
  bool canProcess(const Connection& c) const {
    return !c.refused && !c.outPending() && !handler_.isDeferred(c.id);
  }
  // Re-arms epoll for what the connection waits on now; false: close it.
  bool updateInterest(Connection& c);
  void deliver(std::vector<StoreReply> replies);
  // Processes connections unblocked by deliver() until nothing changes.
  void drainReady();
  void closeConnection(ClientId id);

  TcpStoreServerOptions options_;
  std::string where_;  // bind address:port, for log lines
  FileDescriptor listen_fd_;
  FileDescriptor epoll_fd_;
  FileDescriptor wake_fd_;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> num_clients_{0};
  mutable std::mutex failure_mutex_;
  std::string failure_;  // GUARDED_BY(failure_mutex_)

  // Touched only by the loop thread once it runs.
  std::unordered_map<ClientId, std::unique_ptr<Connection>> connections_;
  std::vector<ClientId> ready_;
  StoreRequestHandler handler_;
  ClientId next_id_ = 2;  // 0 and 1 tag the listening socket and the wake fd
  bool accepting_ = true;
  SteadyTime accept_resume_at_{};

  std::thread thread_;  // last: starts once everything above exists
};

TcpStoreServer::Impl::Impl(const TcpStoreServerOptions& options) : options_(options) {
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
                   << (options.token.empty() ? "" : " (token required)"));
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
    while (!stopping_) {
      if (options_.loop_hook) options_.loop_hook();
      int n = epoll_wait(epoll_fd_.get(), events.data(), static_cast<int>(events.size()),
                         epollTimeoutMillis());
      if (n < 0) {
        if (errno == EINTR) continue;
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
      deliver(handler_.expire(std::chrono::steady_clock::now()));
      drainReady();
      resumeAcceptingIfDue();
    }
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

std::string TcpStoreServer::Impl::failure() const {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  return failure_;
}

int TcpStoreServer::Impl::epollTimeoutMillis() const {
  std::optional<SteadyTime> wake = handler_.nextDeadline();
  if (!accepting_ && (!wake || accept_resume_at_ < *wake)) wake = accept_resume_at_;
  if (!wake) return -1;
  auto left = std::chrono::ceil<std::chrono::milliseconds>(*wake - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, INT_MAX));
}

void TcpStoreServer::Impl::acceptClients() {
  while (true) {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    int fd = accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&address), &length,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == EINTR || err == ECONNABORTED) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      DTRAIN_LOG_WARN("store server " << where_ << ": accept4() failed: " << errnoString(err)
                      << "; pausing new connections for " << kAcceptPause.count() << " ms");
      DTRAIN_CHECK_ERRNO(epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, listen_fd_.get(), nullptr));
      accepting_ = false;
      accept_resume_at_ = std::chrono::steady_clock::now() + kAcceptPause;
      return;
    }
    FileDescriptor socket(fd);
    std::string peer = socketAddressText(reinterpret_cast<sockaddr*>(&address), length);
    try {
      setNoDelay(fd);
    } catch (const IoError& e) {
      DTRAIN_LOG_DEBUG("store server " << where_ << ": " << peer << ": " << e.message());
    }
    ClientId id = next_id_++;
    epoll_event event{EPOLLIN | EPOLLRDHUP, {.u64 = id}};
    DTRAIN_CHECK_ERRNO(epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &event));
    connections_.emplace(id, std::make_unique<Connection>(id, std::move(socket), std::move(peer),
                                                          options_.max_frame_bytes));
    num_clients_.fetch_add(1, std::memory_order_relaxed);
  }
}

void TcpStoreServer::Impl::resumeAcceptingIfDue() {
  if (accepting_ || std::chrono::steady_clock::now() < accept_resume_at_) return;
  epoll_event event{EPOLLIN, {.u64 = kListenTag}};
  DTRAIN_CHECK_ERRNO(epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, listen_fd_.get(), &event));
  accepting_ = true;
}

bool TcpStoreServer::Impl::serviceConnection(Connection& c, uint32_t events) {
  if ((events & EPOLLOUT) && !flush(c)) return false;
  if (events & EPOLLIN) {
    if (!readAvailable(c)) return false;
  } else if (events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
    return false;  // the peer left while we were not reading from it
  }
  if (c.refused && !c.outPending()) return false;
  return updateInterest(c);
}

bool TcpStoreServer::Impl::readAvailable(Connection& c) {
  bool peer_closed = false;
  for (size_t total = 0; total < kMaxReadPerEvent;) {
    ssize_t n = ::recv(c.fd.get(), c.decoder.prepare(kReadChunkBytes), kReadChunkBytes, 0);
    if (n > 0) {
      c.decoder.commit(static_cast<size_t>(n));
      total += static_cast<size_t>(n);
      if (static_cast<size_t>(n) < kReadChunkBytes) break;  // drained; spare a recv()
      continue;
    }
    if (n == 0) {
      peer_closed = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    DTRAIN_LOG_DEBUG("store server " << where_ << ": recv() from " << c.peer
                     << " failed: " << errnoString(errno));
    return false;
  }
  // Requests that arrived before the peer hung up still count (a last set()).
  return processFrames(c) && !peer_closed;
}

bool TcpStoreServer::Impl::processFrames(Connection& c) {
  try {
    while (canProcess(c)) {
      std::optional<std::string_view> payload = c.decoder.next();
      if (!payload) break;
      if (!c.greeted) {
        if (!greet(c, *payload)) return false;
        continue;
      }
      std::optional<std::string> reply =
          handler_.handle(c.id, *payload, std::chrono::steady_clock::now());
      if (reply && !send(c, std::move(*reply))) return false;
    }
  } catch (const WireError& e) {
    DTRAIN_LOG_ERROR("store server " << where_ << ": closing the connection from " << c.peer
                     << ": " << e.message());
    return false;
  }
  return true;
}

bool TcpStoreServer::Impl::greet(Connection& c, std::string_view payload) {
  PayloadReader in(payload);
  uint8_t op = in.u8("op");
  if (op != static_cast<uint8_t>(StoreOp::kHello)) {
    throw WireError("expected HELLO as the first frame, got " + storeOpName(op));
  }
  uint32_t version = in.u32("protocol_version");
  auto refuse = [&](RefusalReason reason, const std::string& message) {
    DTRAIN_LOG_WARN("store server " << where_ << ": refused " << c.peer << ": " << message);
    c.refused = true;
    return send(c, FrameWriter(ReplyStatus::kRefused)
                       .u8(static_cast<uint8_t>(reason))
                       .bytes(message)
                       .finish());
  };
  if (version != kStoreProtocolVersion) {
    return refuse(RefusalReason::kProtocolVersion,
                  "protocol version mismatch: the client speaks version " + std::to_string(version) +
                      ", the server speaks version " + std::to_string(kStoreProtocolVersion));
  }
  std::string token = in.bytes("token");
  in.expectEnd("HELLO");
  if (!options_.token.empty() && !tokensMatch(options_.token, token)) {
    return refuse(RefusalReason::kAuthentication, "authentication failed");
  }
  c.greeted = true;
  return send(c, FrameWriter(ReplyStatus::kOk).u32(kStoreProtocolVersion).finish());
}

bool TcpStoreServer::Impl::send(Connection& c, std::string frame) {
  if (c.outPending()) {
    c.out.append(frame);
  } else {
    c.out = std::move(frame);
    c.out_offset = 0;
  }
  return flush(c);
}

bool TcpStoreServer::Impl::flush(Connection& c) {
  while (c.outPending()) {
    ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_offset, c.out.size() - c.out_offset,
                       MSG_NOSIGNAL);
    if (n >= 0) {
      c.out_offset += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;  // EPOLLOUT resumes it
    DTRAIN_LOG_DEBUG("store server " << where_ << ": send() to " << c.peer
                     << " failed: " << errnoString(errno));
    return false;
  }
  c.out.clear();
  c.out_offset = 0;
  return true;
}

bool TcpStoreServer::Impl::updateInterest(Connection& c) {
  // Not reading from a connection that is blocked (deferred wait, unsent
  // replies) lets TCP flow control push back on it; EPOLLRDHUP still tells
  // us when it goes away.
  uint32_t interest = EPOLLRDHUP;
  if (canProcess(c)) interest |= EPOLLIN;
  if (c.outPending()) interest |= EPOLLOUT;
  if (interest == c.interest) return true;
  epoll_event event{interest, {.u64 = c.id}};
  if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, c.fd.get(), &event) != 0) {
    DTRAIN_LOG_ERROR("store server " << where_ << ": epoll_ctl(EPOLL_CTL_MOD) for " << c.peer
                     << " failed: " << errnoString(errno));
    return false;
  }
  c.interest = interest;
  return true;
}

void TcpStoreServer::Impl::deliver(std::vector<StoreReply> replies) {
  for (StoreReply& reply : replies) {
    auto it = connections_.find(reply.client);
    if (it == connections_.end()) continue;
    if (send(*it->second, std::move(reply.frame))) {
      ready_.push_back(reply.client);
    } else {
      closeConnection(reply.client);
    }
  }
}

void TcpStoreServer::Impl::drainReady() {
  while (true) {
    deliver(handler_.takeCompleted());
    if (ready_.empty()) return;
    ClientId id = ready_.back();
    ready_.pop_back();
    auto it = connections_.find(id);
    if (it == connections_.end()) continue;
    Connection& c = *it->second;
    // Frames that queued up behind the answered wait are served now.
    if (!processFrames(c) || !updateInterest(c)) closeConnection(id);
  }
}

void TcpStoreServer::Impl::closeConnection(ClientId id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  handler_.forget(id);
  connections_.erase(it);  // closing the fd also removes it from the epoll set
  num_clients_.fetch_sub(1, std::memory_order_relaxed);
}

TcpStoreServer::TcpStoreServer(const TcpStoreServerOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}
TcpStoreServer::~TcpStoreServer() = default;
uint16_t TcpStoreServer::port() const { return impl_->port(); }
size_t TcpStoreServer::numClients() const { return impl_->numClients(); }
std::string TcpStoreServer::failure() const { return impl_->failure(); }

}  // namespace dtrain
