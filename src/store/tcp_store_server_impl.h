// TcpStoreServer's insides (private to store/): one event-loop thread over
// epoll (level-triggered) and non-blocking sockets. Requests are executed by
// StoreRequestHandler; the loop moves bytes, greets connections, and keeps
// any one client from costing the others more than its share:
//   - memory: bytes are read into one loop-owned buffer and only what
//     arrived is kept per connection; before HELLO a connection may buffer
//     one HELLO-sized frame; all connections together at most
//     max_buffered_bytes; buffers shrink when they drain;
//   - time: each loop turn serves a bounded slice of each connection's
//     frames, accepts and expires a bounded number, then looks at epoll again;
//   - descriptors: a connection limit answered with a reason, a HELLO
//     timeout and an idle timeout.
// tcp_store_server.cc holds the loop and the connection lifecycle;
// tcp_store_server_io.cc reads, executes and writes.
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/file_descriptor.h"
#include "common/log.h"
#include "common/socket.h"
#include "store/request_handler.h"
#include "store/tcp_store.h"
#include "store/wire.h"

namespace dtrain {

// Segments the kernel received on a TCP socket, keep-alive probes included
// (tcp_info's tcpi_segs_in); nullopt where the kernel does not say.
std::optional<uint32_t> tcpSegmentsIn(int fd);

class TcpStoreServer::Impl {
 public:
  explicit Impl(const TcpStoreServerOptions& options);
  ~Impl();

  uint16_t port() const { return port_; }
  size_t numClients() const { return num_clients_.load(std::memory_order_relaxed); }
  std::string failure() const;

 private:
  struct Connection {
    Connection(ClientId id, FileDescriptor fd, std::string peer, uint32_t max_frame_bytes,
               SteadyTime now)
        : id(id), fd(std::move(fd)), peer(std::move(peer)), decoder(max_frame_bytes),
          accepted_at(now), last_active(now) {}
    ClientId id;
    FileDescriptor fd;
    std::string peer;  // "ip:port", for log lines
    FrameDecoder decoder;
    size_t accounted_bytes = 0;  // decoder bytes counted in buffered_bytes_
    std::string out;   // reply bytes the socket has not taken yet
    size_t out_offset = 0;
    bool greeted = false;
    bool refused = false;   // answered REFUSED; closed once the peer has read it
    bool backlogged = false;  // complete frames wait for the next loop turn
    SteadyTime accepted_at;
    SteadyTime last_active;  // bytes moved, or the peer's TCP showed life
    std::optional<uint32_t> segments_in;  // at the last idle check
    uint32_t interest = EPOLLIN | EPOLLRDHUP;
    bool outPending() const { return out_offset < out.size(); }
  };

  // --- tcp_store_server.cc: the loop and the lifecycle of connections
  void run();
  void turn(std::vector<epoll_event>& events);
  int epollTimeoutMillis() const;
  void acceptClients();
  void admit(FileDescriptor socket, std::string peer);
  void resumeAcceptingIfDue();
  // Closes connections past the HELLO, idle or refusal deadline.
  void sweep(SteadyTime now);
  void serveBacklog();
  void closeConnection(ClientId id);
  void giveMemoryBackIfDue(SteadyTime now);

  // --- tcp_store_server_io.cc. Each bool returns false when the connection
  // must be closed.
  bool serviceConnection(Connection& c, uint32_t events);
  bool readAvailable(Connection& c);
  bool discardInput(Connection& c);
  bool processFrames(Connection& c);
  bool greet(Connection& c, std::string_view payload);
  bool refuse(Connection& c, RefusalReason reason, const std::string& message);
  bool send(Connection& c, std::string frame);
  bool flush(Connection& c);
  bool canProcess(const Connection& c) const {
    return !c.refused && !c.outPending() && !handler_.isDeferred(c.id);
  }
  // Re-arms epoll for what the connection waits on now; false: close it.
  bool updateInterest(Connection& c);
  void account(Connection& c);
  void deliver(std::vector<StoreReply> replies);
  // Processes connections unblocked by deliver() until nothing changes.
  void drainReady();
  // At the connection limit: closes the oldest connection that has not
  // said HELLO (a client that authenticates promptly never is one), so a
  // flood of idle sockets cannot keep clients out. False when every
  // connection has said HELLO.
  bool evictOldestStranger(const std::string& newcomer);

  TcpStoreServerOptions options_;
  size_t max_connections_;
  uint32_t max_hello_frame_bytes_;
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
  size_t num_refused_ = 0;  // connections_ lingering after a REFUSED reply
  // Connections in the order they were accepted, for finding the oldest one
  // still without a HELLO when the server is full; entries of connections
  // greeted or closed since are skipped, and pruned by sweep().
  std::deque<ClientId> accept_order_;
  size_t buffered_bytes_ = 0;  // over all decoders
  std::vector<char> read_buffer_;  // every recv() lands here first
  std::vector<ClientId> ready_;
  std::vector<ClientId> backlog_;
  StoreRequestHandler handler_;
  ClientId next_id_ = 2;  // 0 and 1 tag the listening socket and the wake fd
  bool accepting_ = true;
  SteadyTime accept_resume_at_{};
  std::chrono::milliseconds sweep_interval_;
  SteadyTime next_sweep_{};
  size_t freed_since_trim_ = 0;
  SteadyTime next_trim_{};

  // One throttle per kind of line a misbehaving client can repeat at will.
  LogThrottle accept_log_, limit_log_, timeout_log_, buffer_log_, protocol_log_;

  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace dtrain
