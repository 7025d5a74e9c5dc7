// Helpers shared by the store tests: a raw protocol connection (to send what
// a well-behaved TcpStore never would), client options for a server, and
// polling for a condition with a generous "does not hang" bound.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "common/socket.h"
#include "store/tcp_store.h"
#include "store/wire.h"

namespace dtrain::testing {

inline TcpStoreClientOptions clientOptionsFor(const TcpStoreServer& server,
                                              const std::string& token = "") {
  TcpStoreClientOptions options;
  options.host = "127.0.0.1";
  options.port = server.port();
  options.token = token;
  options.connect_timeout = std::chrono::seconds(30);
  options.timeout = std::chrono::seconds(60);
  return options;
}

inline TcpStoreServerOptions loopbackServerOptions() {
  TcpStoreServerOptions options;
  options.bind_address = "127.0.0.1";
  return options;
}

// True once `condition` holds; false if it still does not after `limit`.
inline bool eventually(const std::function<bool()>& condition,
                       std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A port with nothing listening on it (bound once, then released).
inline uint16_t freePort() {
  FileDescriptor probe = listenTcp("127.0.0.1", 0, 1);
  return localPort(probe.get());
}

// Frames over a connected socket, sent and read by hand: the tests' way to
// say what a well-behaved peer never would.
class RawFrames {
 public:
  explicit RawFrames(FileDescriptor socket) : socket_(std::move(socket)) {}

  void sendBytes(std::string_view bytes) {
    // The server may already have closed on us; that is what some tests expect.
    sendAll(socket_.get(), bytes, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  }

  std::string hello(uint32_t version = kStoreProtocolVersion, const std::string& token = "") {
    sendBytes(FrameWriter(StoreOp::kHello).u32(version).bytes(token).finish());
    auto reply = readFrame();
    return reply ? *reply : std::string();
  }

  // The next reply payload; nullopt when the server closed the connection.
  std::optional<std::string> readFrame(std::chrono::milliseconds limit = std::chrono::seconds(20)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (true) {
      if (auto payload = decoder_.next()) return std::string(*payload);
      if (!pollUntil(socket_.get(), POLLIN, deadline)) {
        ADD_FAILURE() << "the server neither replied nor closed within " << limit.count() << " ms";
        return std::nullopt;
      }
      ssize_t n = ::recv(socket_.get(), decoder_.prepare(4096), 4096, 0);
      if (n <= 0) return std::nullopt;  // EOF or reset: closed by the server
      decoder_.commit(static_cast<size_t>(n));
    }
  }

  bool closedByServer() { return !readFrame().has_value(); }

 private:
  FileDescriptor socket_;
  FrameDecoder decoder_{kStoreMaxFrameBytes};
};

// A raw client connection to a store server on 127.0.0.1.
class RawConnection : public RawFrames {
 public:
  explicit RawConnection(uint16_t port) : RawFrames(connect(port)) {}

 private:
  static FileDescriptor connect(uint16_t port) {
    ConnectAttempt attempt = connectTcpOnce("127.0.0.1", port, std::chrono::seconds(10));
    if (!attempt.socket.valid()) throw IoError("raw connect failed: " + attempt.error);
    return std::move(attempt.socket);
  }
};

}  // namespace dtrain::testing
