// TcpStore: the Store over TCP. One TcpStoreServer (in the agent, or rank 0)
// serves many TcpStore clients (every worker of a 128-node x 8-GPU job).
//
// Wire protocol (version kProtocolVersion): every message is a frame
//   u32 length (big-endian, of what follows) | payload
// with length <= kMaxFrameBytes. The first frame on a connection is HELLO
// (protocol version + auth token); the server answers OK or an error and
// closes. A server at its connection limit answers the HELLO of one more
// client with REFUSED (kTooManyConnections) and a message naming the limit. A frame that is malformed, oversized, or of an unknown op closes that
// connection with a logged error; every other client is unaffected.
//
// Authentication: when the server has a token, clients must present the same
// token; one without it is refused with "authentication failed". Tokens come
// from DTRAIN_STORE_TOKEN or the file named by DTRAIN_STORE_TOKEN_FILE
// (see storeTokenFromEnvironment()).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "store/store.h"

namespace dtrain {

inline constexpr uint32_t kStoreProtocolVersion = 1;
inline constexpr uint32_t kStoreMaxFrameBytes = 64u << 20;

struct TcpStoreServerOptions {
  std::string bind_address = "0.0.0.0";  // or "127.0.0.1", "::", a host's IP
  uint16_t port = 0;                      // 0: pick a free port (see port())
  std::string token;                      // empty: no authentication
  uint32_t max_frame_bytes = kStoreMaxFrameBytes;

  // What one client may cost the others. A client over a limit gets a reply
  // or a log line that names the limit (and the option), never a silent hang.
  //
  // Connections served at once; one more gets a REFUSED reply naming the
  // limit. 0: the open-file limit (RLIMIT_NOFILE, raised to its hard limit)
  // less an eighth of it (at least 64) left to the process for other files.
  size_t max_connections = 0;
  // Bytes of unfinished requests buffered over all connections; a
  // connection whose bytes would pass it is closed (logged). Before HELLO a
  // connection may buffer one HELLO frame only (kStoreMaxHelloFrameBytes).
  size_t max_buffered_bytes = size_t{256} << 20;
  // A connection that has not said HELLO this long after connecting is closed.
  std::chrono::milliseconds hello_timeout{std::chrono::seconds(10)};
  // A greeted connection is closed after this long without a request, a
  // reply, or a TCP segment from the peer. A deferred GET/WAIT is not
  // idle, and TcpStore clients are never cut by it: their TCP keep-alive
  // probes (every few seconds, see setPeerSilenceLimit()) count as life.
  // 0: never.
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(10)};
  // Keys one WAIT or CHECK may name; more gets an ERROR reply naming the
  // limit, and the connection stays usable.
  size_t max_keys_per_request = 65536;
  // Tests: called by the serving thread once per loop turn; an exception it
  // throws fails the loop as an OS error would.
  std::function<void()> loop_hook;
};

// Serves on a background thread from construction until destruction. If the
// serving loop fails (an OS error), it does not die silently: every client
// connection and the listening socket are closed at once (clients get an
// error, not a timeout; new ones are refused), the failure is logged, and
// failure() says why so the owner can stop with an error naming it.
class TcpStoreServer {
 public:
  explicit TcpStoreServer(const TcpStoreServerOptions& options);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  uint16_t port() const;
  // Connected clients right now (tests, metrics).
  size_t numClients() const;
  // "" while serving; after the loop failed, "store server HOST:PORT
  // stopped serving: <why>".
  std::string failure() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

struct TcpStoreClientOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string token;
  // Connect retries with backoff until this deadline, then TimeoutError
  // naming host:port.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  // Default timeout of get()/wait().
  std::chrono::milliseconds timeout = Store::kDefaultTimeout;
  // Bound on a request that does not wait for keys (set, add, check, ...):
  // the server answers those at once, so no reply by then means the store
  // or the way to it is gone (TimeoutError naming host:port).
  std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};
  // A connection whose server stops answering (a silent partition, a dead
  // machine) fails within about this long even inside a long get()/wait()
  // (TCP keep-alive and TCP_USER_TIMEOUT; see setPeerSilenceLimit()).
  std::chrono::milliseconds liveness_timeout{std::chrono::seconds(10)};
};

// A request that fails (no reply in time, connection lost) leaves the
// connection unusable, since a late reply would be read as the answer to the
// next request; the next request connects again (within its own deadline),
// so a store that was briefly unreachable serves this client again.
class TcpStore : public Store {
 public:
  explicit TcpStore(const TcpStoreClientOptions& options);
  ~TcpStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compareSet(const std::string& key, const std::string& expected,
                         const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;
  bool check(const std::vector<std::string>& keys) override;
  bool deleteKey(const std::string& key) override;
  int64_t numKeys() override;
  // Deleted by the server when this client's connection closes; after a
  // reconnect the key is gone until set again.
  void setEphemeral(const std::string& key, const std::string& value) override;

  const std::string& host() const { return options_.host; }
  uint16_t port() const { return options_.port; }

 private:
  class Connection;
  using Clock = std::chrono::steady_clock;
  struct WaitBudget {
    std::chrono::milliseconds server_wait{0};  // what the server is asked to wait
    Clock::time_point reply_deadline;          // when the client gives up on the reply
  };
  Clock::time_point requestDeadline() const;
  WaitBudget waitBudget(std::chrono::milliseconds timeout) const;
  std::unique_lock<std::timed_mutex> lockBy(Clock::time_point deadline);

  TcpStoreClientOptions options_;
  // One request at a time on the connection; a caller waits for it no
  // longer than its own deadline (TimeoutError saying so).
  std::timed_mutex mutex_;
  std::unique_ptr<Connection> connection_;
};

// `token` when non-empty, else the contents of `token_file` (trailing newline
// stripped), else "". An unreadable file is an IoError naming it; a file that
// is a directory, not a regular file, empty or over 4 KiB is a ConfigError
// naming it (never a silent "no authentication").
std::string storeTokenFrom(const std::optional<std::string>& token, const std::optional<std::string>& token_file);

// storeTokenFrom(DTRAIN_STORE_TOKEN, DTRAIN_STORE_TOKEN_FILE) of this process.
std::string storeTokenFromEnvironment();

}  // namespace dtrain
