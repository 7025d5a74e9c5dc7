// The OS seam for TCP sockets, for every layer (the store, doctor's peer
// test, the launcher's free ports). Every failing call becomes an IoError
// naming the call and the errno text (DTRAIN_CHECK_ERRNO), or names the
// address it was trying to reach. Every wait has a deadline.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/file_descriptor.h"

namespace dtrain {

using SteadyTime = std::chrono::steady_clock::time_point;

// "host:port", with IPv6 literals bracketed: "[::1]:29500".
std::string hostPortText(const std::string& host, uint16_t port);
// The numeric "ip:port" of a socket address, e.g. "10.0.0.7:50112".
std::string socketAddressText(const sockaddr* address, socklen_t length);

// Raises the soft RLIMIT_NOFILE to the hard limit, so one process can hold the
// server's side of 1,024+ client connections (the default soft limit is often
// 1,024). Never fails: a refusal is logged. Returns the soft limit now in effect.
uint64_t raiseOpenFileLimit();

void setNonBlocking(int fd);
void setNoDelay(int fd);
// A connection whose peer stops answering fails within about `silence` on its
// own, even while nothing is being sent (a silent network partition, a peer
// machine that lost power): TCP keep-alive probes start after silence / 3 and
// give up after three unanswered ones, and unacknowledged data gives up after
// `silence` (TCP_USER_TIMEOUT). Blocked reads and writes then fail with
// ETIMEDOUT instead of waiting for the kernel's ~15-minute retransmission limit.
void setPeerSilenceLimit(int fd, std::chrono::milliseconds silence);

// A non-blocking, SO_REUSEADDR socket listening on bind_address:port
// (IPv4/IPv6 literal or host name; port 0 picks a free port). IoError naming
// the address when no resolved address can be bound.
FileDescriptor listenTcp(const std::string& bind_address, uint16_t port, int backlog);
// The port a bound socket listens on.
uint16_t localPort(int fd);

// One attempt to connect to host:port within `timeout`, trying every address
// the name resolves to. On success `socket` is a connected non-blocking socket;
// otherwise `error` says why (resolver or errno text) so a caller can retry.
struct ConnectAttempt {
  FileDescriptor socket;
  std::string error;
};
ConnectAttempt connectTcpOnce(const std::string& host, uint16_t port,
                              std::chrono::milliseconds timeout);

// poll() on one fd until `events` are ready or `deadline` passes (false).
// POLLERR/POLLHUP count as ready: the following send/recv reports them.
bool pollUntil(int fd, short events, SteadyTime deadline);

// Sends all of `bytes` on a non-blocking socket; false when the deadline
// passes first. IoError (naming send) when the connection fails.
bool sendAll(int fd, std::string_view bytes, SteadyTime deadline);

// Receives exactly `size` bytes on a non-blocking socket; false when the
// deadline passes, or `stop` (asked at least every 100 ms) says so, first.
// IoError "connection closed by the other side" when it hangs up, or naming
// recv when the connection fails.
bool receiveAll(int fd, char* data, size_t size, SteadyTime deadline, const std::function<bool()>& stop = {});

// A TCP port the kernel reports free right now. The socket is closed before
// the caller's user binds the port, so another process could take it in
// between; each caller says how it copes (a fresh --standalone port per run;
// MASTER_PORT retried on collision by the launcher). `loopback_only`: bind
// 127.0.0.1 rather than every address. `purpose` names the port in the
// IoError raised when none can be had.
uint16_t freeTcpPort(bool loopback_only, const std::string& purpose);

// The numeric address and port at one end of a socket.
struct SocketEndpoint {
  std::string ip;  // "10.0.0.7", "::1"
  uint16_t port = 0;
};
// Where `fd` is bound (getsockname) and whom it is connected to
// (getpeername); nullopt when the kernel will not say (not bound, not
// connected, not an IP socket).
std::optional<SocketEndpoint> localEndpoint(int fd);
std::optional<SocketEndpoint> peerEndpoint(int fd);
// The numeric "ip:port" `fd` is bound to, as socketAddressText() writes it;
// IoError naming getsockname when the kernel will not say.
std::string boundAddressText(int fd);

// A connection taken from a listening socket: non-blocking, close-on-exec,
// and who it came from ("ip:port").
struct AcceptedConnection {
  FileDescriptor socket;
  std::string peer;
};
// One accept4() on `listen_fd`; nullopt when no connection is waiting or the
// accept failed (a client that gave up meanwhile: the caller polls again).
std::optional<AcceptedConnection> acceptConnection(int listen_fd);

// listen() again on a socket that listens already, with a new backlog (the
// kernel takes the new value); false, errno set, when refused.
bool setListenBacklog(int fd, int backlog);
// SO_REUSEADDR, for a caller that cannot take an exception (a callback of a
// foreign library); false, errno set, when refused.
bool setReuseAddress(int fd);
// shutdown(SHUT_WR): a FIN goes out, reading goes on. Errors are ignored:
// a peer that is gone already needs no goodbye.
void shutdownSending(int fd);

// One recv() / send() that never blocks (MSG_DONTWAIT), retried on EINTR;
// send never raises SIGPIPE. The bytes moved; 0 from receiveSome when the
// peer has hung up; -1 with errno set otherwise (EAGAIN or EWOULDBLOCK:
// nothing can move now).
ssize_t receiveSome(int fd, char* data, size_t size);
ssize_t sendSome(int fd, const char* data, size_t size);

}  // namespace dtrain
