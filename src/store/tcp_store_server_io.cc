// TcpStoreServer: reading, executing and writing on one connection (see
// tcp_store_server_impl.h for the budgets these keep to).
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "common/error.h"
#include "store/tcp_store_server_impl.h"

namespace dtrain {
namespace {

// What one connection may read, and execute, per loop turn before the
// others get theirs: about a millisecond of work for the largest requests.
constexpr size_t kMaxReadPerEvent = 256 << 10;
constexpr size_t kFrameBytesPerTurn = 64 << 10;
constexpr int kFramesPerTurn = 256;
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

std::optional<uint32_t> tcpSegmentsIn(int fd) {
  tcp_info info{};
  socklen_t length = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return std::nullopt;
  if (length < offsetof(tcp_info, tcpi_segs_in) + sizeof(info.tcpi_segs_in)) return std::nullopt;
  return info.tcpi_segs_in;
}

bool TcpStoreServer::Impl::serviceConnection(Connection& c, uint32_t events) {
  if ((events & EPOLLOUT) && !flush(c)) return false;
  if (c.refused) {
    if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) && !discardInput(c)) return false;
  } else if (events & EPOLLIN) {
    if (!readAvailable(c)) return false;
  } else if (events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
    return false;  // the peer left while we were not reading from it
  }
  return updateInterest(c);
}

bool TcpStoreServer::Impl::readAvailable(Connection& c) {
  bool peer_closed = false;
  for (size_t total = 0; total < kMaxReadPerEvent;) {
    size_t room = read_buffer_.size();
    if (!c.greeted) {
      // A stranger's bytes beyond one HELLO stay in its own socket buffer.
      const size_t hello_bytes = kStoreFrameHeaderBytes + max_hello_frame_bytes_;
      if (c.decoder.bufferedBytes() >= hello_bytes) break;
      room = std::min(room, hello_bytes - c.decoder.bufferedBytes());
    }
    ssize_t n = ::recv(c.fd.get(), read_buffer_.data(), room, 0);
    if (n > 0) {
      const size_t got = static_cast<size_t>(n);
      if (buffered_bytes_ + got > options_.max_buffered_bytes) {
        DTRAIN_LOG_THROTTLED(buffer_log_, LogLevel::kWarn,
                             "store server " << where_ << ": closed " << c.peer
                             << ": its unfinished request would take the bytes buffered for all "
                                "connections past the limit of "
                             << options_.max_buffered_bytes
                             << " (TcpStoreServerOptions::max_buffered_bytes)");
        return false;
      }
      // Only what arrived is kept: a connection that sent one byte costs one byte.
      c.decoder.append(std::string_view(read_buffer_.data(), got));
      account(c);
      c.last_active = std::chrono::steady_clock::now();
      c.segments_in.reset();
      total += got;
      if (got < room) break;  // drained; spare a recv()
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

bool TcpStoreServer::Impl::discardInput(Connection& c) {
  for (size_t total = 0; total < kMaxReadPerEvent;) {
    ssize_t n = ::recv(c.fd.get(), read_buffer_.data(), read_buffer_.size(), 0);
    if (n > 0) {
      total += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);  // 0: the peer read why and left
  }
  return true;
}

bool TcpStoreServer::Impl::processFrames(Connection& c) {
  size_t bytes = 0;
  int frames = 0;
  try {
    while (canProcess(c)) {
      if (bytes >= kFrameBytesPerTurn || frames >= kFramesPerTurn) {
        // The rest waits for the next turn, after every other connection's.
        if (c.decoder.hasFrame() && !c.backlogged) {
          c.backlogged = true;
          backlog_.push_back(c.id);
        }
        break;
      }
      std::optional<std::string_view> payload = c.decoder.next();
      if (!payload) break;
      bytes += kStoreFrameHeaderBytes + payload->size();
      ++frames;
      if (!c.greeted) {
        if (!greet(c, *payload)) return false;
        continue;
      }
      std::optional<std::string> reply =
          handler_.handle(c.id, *payload, std::chrono::steady_clock::now());
      if (reply && !send(c, std::move(*reply))) return false;
    }
  } catch (const WireError& e) {
    DTRAIN_LOG_THROTTLED(protocol_log_, LogLevel::kError,
                         "store server " << where_ << ": closing the connection from " << c.peer
                         << (c.greeted ? "" : " (before HELLO)") << ": " << e.message());
    return false;
  }
  const size_t capacity = c.decoder.capacityBytes();
  c.decoder.shrinkIfIdle();
  freed_since_trim_ += capacity - c.decoder.capacityBytes();
  account(c);
  return true;
}

bool TcpStoreServer::Impl::greet(Connection& c, std::string_view payload) {
  PayloadReader in(payload);
  uint8_t op = in.u8("op");
  if (op != static_cast<uint8_t>(StoreOp::kHello)) {
    throw WireError("expected HELLO as the first frame, got " + storeOpName(op));
  }
  uint32_t version = in.u32("protocol_version");
  if (version != kStoreProtocolVersion) {
    return refuse(c, RefusalReason::kProtocolVersion,
                  "protocol version mismatch: the client speaks version " + std::to_string(version) +
                      ", the server speaks version " + std::to_string(kStoreProtocolVersion));
  }
  std::string token = in.bytes("token");
  in.expectEnd("HELLO");
  if (!options_.token.empty() && !tokensMatch(options_.token, token)) {
    return refuse(c, RefusalReason::kAuthentication, "authentication failed");
  }
  c.greeted = true;
  c.decoder.setMaxFrameBytes(options_.max_frame_bytes);
  return send(c, FrameWriter(ReplyStatus::kOk).u32(kStoreProtocolVersion).finish());
}

bool TcpStoreServer::Impl::refuse(Connection& c, RefusalReason reason, const std::string& message) {
  DTRAIN_LOG_THROTTLED(limit_log_, LogLevel::kWarn,
                       "store server " << where_ << ": refused " << c.peer << ": " << message);
  c.refused = true;
  ++num_refused_;
  c.last_active = std::chrono::steady_clock::now();  // the lingering starts
  return send(c, FrameWriter(ReplyStatus::kRefused)
                     .u8(static_cast<uint8_t>(reason))
                     .bytes(message)
                     .finish());
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
      if (!c.refused) c.last_active = std::chrono::steady_clock::now();
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;  // EPOLLOUT resumes it
    DTRAIN_LOG_DEBUG("store server " << where_ << ": send() to " << c.peer
                     << " failed: " << errnoString(errno));
    return false;
  }
  // A large reply's buffer is not kept for the life of the connection.
  std::string().swap(c.out);
  c.out_offset = 0;
  // The refusal is out: say so with a FIN, and drop what the peer still
  // sends until it closes (closing now would reset the connection and could
  // destroy the reason before the peer reads it).
  if (c.refused) ::shutdown(c.fd.get(), SHUT_WR);
  return true;
}

bool TcpStoreServer::Impl::updateInterest(Connection& c) {
  // Not reading from a connection that is blocked (deferred wait, unsent
  // replies, frames left for the next turn) lets TCP flow control push back
  // on it; EPOLLRDHUP still tells us when it goes away.
  uint32_t interest = EPOLLRDHUP;
  if (c.refused || (canProcess(c) && !c.backlogged)) interest |= EPOLLIN;
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

void TcpStoreServer::Impl::account(Connection& c) {
  const size_t now_buffered = c.decoder.bufferedBytes();
  buffered_bytes_ = buffered_bytes_ - c.accounted_bytes + now_buffered;
  c.accounted_bytes = now_buffered;
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

}  // namespace dtrain
