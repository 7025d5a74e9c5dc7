// TcpStore: the client side. One connection per TcpStore, one request in
// flight at a time (a mutex serialises callers), replies read in order.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/socket.h"
#include "store/tcp_store.h"
#include "store/wire.h"

namespace dtrain {
namespace {

constexpr std::chrono::milliseconds kFirstBackoff{10};
constexpr std::chrono::milliseconds kMaxBackoff{1000};
// Timeouts are capped so that deadline arithmetic cannot overflow; a year is
// "forever" for a store.
constexpr std::chrono::milliseconds kMaxTimeout{int64_t{365} * 24 * 3600 * 1000};

std::chrono::milliseconds clampTimeout(std::chrono::milliseconds timeout) {
  return std::clamp(timeout, std::chrono::milliseconds(0), kMaxTimeout);
}

// The server answers a timed-out wait itself; this client-side margin only
// catches a server that stopped answering at all.
std::chrono::milliseconds withSafetyMargin(std::chrono::milliseconds server_timeout) {
  server_timeout = clampTimeout(server_timeout);
  return server_timeout + std::chrono::seconds(2) + server_timeout / 10;
}

std::string secondsText(std::chrono::milliseconds duration) {
  std::ostringstream os;
  os << static_cast<double>(duration.count()) / 1000.0;
  return os.str();
}

std::string joinKeys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& key : keys) out += (out.empty() ? "" : ", ") + key;
  return out;
}

}  // namespace

class TcpStore::Connection {
 public:
  explicit Connection(const TcpStoreClientOptions& options)
      : where_(hostPortText(options.host, options.port)), decoder_(kStoreMaxFrameBytes) {
    connectWithRetry(options);
    greet(options);
  }

  const std::string& where() const { return where_; }

  // Sends one request frame and hands the reply's fields (after an OK
  // status) to `parse`. A TIMEOUT reply calls `on_timeout(missing_keys)`,
  // which throws; ERROR replies and transport failures throw here.
  template <typename Parse, typename OnTimeout>
  auto call(const std::string& frame, std::chrono::milliseconds reply_timeout, Parse&& parse,
            OnTimeout&& on_timeout) {
    PayloadReader reply(roundTrip(frame, reply_timeout));
    try {
      auto status = static_cast<ReplyStatus>(reply.u8("status"));
      if (status == ReplyStatus::kTimeout) on_timeout(reply.strings("missing_keys"));
      if (status == ReplyStatus::kError) {
        throw ConfigError("store at " + where_ + ": " + reply.bytes("message"));
      }
      if (status != ReplyStatus::kOk) {
        fail("unexpected reply status " + std::to_string(static_cast<int>(status)));
      }
      return parse(reply);
    } catch (const WireError& e) {
      fail("malformed reply: " + e.message());
    }
  }

 private:
  void connectWithRetry(const TcpStoreClientOptions& options) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + clampTimeout(options.connect_timeout);
    auto backoff = kFirstBackoff;
    while (true) {
      auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                           std::chrono::milliseconds(0));
      ConnectAttempt attempt = connectTcpOnce(options.host, options.port, left);
      if (attempt.socket.valid()) {
        socket_ = std::move(attempt.socket);
        setNoDelay(socket_.get());
        return;
      }
      if (Clock::now() >= deadline) {
        throw TimeoutError("could not connect to the store at " + where_ + " within " +
                           secondsText(options.connect_timeout) + " s: " + attempt.error);
      }
      // The server may still be starting (rank 0 races its workers).
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
  }

  void greet(const TcpStoreClientOptions& options) {
    std::string hello =
        FrameWriter(StoreOp::kHello).u32(kStoreProtocolVersion).bytes(options.token).finish();
    PayloadReader reply(roundTrip(hello, withSafetyMargin(clampTimeout(options.timeout))));
    RefusalReason reason;
    std::string message;
    try {
      auto status = static_cast<ReplyStatus>(reply.u8("status"));
      if (status == ReplyStatus::kOk) return;
      if (status != ReplyStatus::kRefused) fail("unexpected reply to HELLO");
      reason = static_cast<RefusalReason>(reply.u8("reason"));
      message = reply.bytes("message");
    } catch (const WireError& e) {
      fail("malformed reply to HELLO: " + e.message());
    }
    broken_ = "the server refused the connection";
    if (reason == RefusalReason::kAuthentication) {
      throw ConfigError("store at " + where_ +
                        " refused the connection: authentication failed (check "
                        "DTRAIN_STORE_TOKEN / DTRAIN_STORE_TOKEN_FILE)");
    }
    throw ConfigError("store at " + where_ + " refused the connection: " + message);
  }

  std::string_view roundTrip(const std::string& frame, std::chrono::milliseconds reply_timeout) {
    if (!broken_.empty()) {
      throw IoError("the connection to the store at " + where_ + " is unusable: " + broken_);
    }
    if (frame.size() - 4 > kStoreMaxFrameBytes) {
      throw ConfigError("a store request of " + std::to_string(frame.size() - 4) +
                        " bytes exceeds the frame limit of " + std::to_string(kStoreMaxFrameBytes) +
                        " bytes (store at " + where_ + ")");
    }
    const auto deadline = std::chrono::steady_clock::now() + reply_timeout;
    try {
      if (!sendAll(socket_.get(), frame, deadline)) timedOut(reply_timeout);
      while (true) {
        if (auto payload = decoder_.next()) return *payload;
        if (!pollUntil(socket_.get(), POLLIN, deadline)) timedOut(reply_timeout);
        constexpr size_t kChunk = 64 * 1024;
        ssize_t n = ::recv(socket_.get(), decoder_.prepare(kChunk), kChunk, 0);
        if (n > 0) {
          decoder_.commit(static_cast<size_t>(n));
        } else if (n == 0) {
          fail("the server closed the connection");
        } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
          fail("recv() failed: " + errnoString(errno));
        }
      }
    } catch (const TimeoutError&) {
      throw;
    } catch (const Error& e) {
      if (!broken_.empty()) throw;
      fail(e.message());  // send() failures, an oversized reply
    }
  }

  // The reply may still arrive later and would be read as the answer to the
  // next request, so the connection is given up.
  [[noreturn]] void timedOut(std::chrono::milliseconds reply_timeout) {
    broken_ = "an earlier request got no reply within " + secondsText(reply_timeout) + " s";
    socket_.reset();
    throw TimeoutError("the store at " + where_ + " did not reply within " +
                       secondsText(reply_timeout) + " s");
  }

  [[noreturn]] void fail(const std::string& why) {
    broken_ = why;
    socket_.reset();
    throw IoError("lost the connection to the store at " + where_ + ": " + why);
  }

  std::string where_;
  FileDescriptor socket_;
  FrameDecoder decoder_;
  std::string broken_;  // why the connection can no longer be used; empty while healthy
};

TcpStore::TcpStore(const TcpStoreClientOptions& options)
    : options_(options), connection_(std::make_unique<Connection>(options)) {
  setTimeout(options.timeout);
}

TcpStore::~TcpStore() = default;

namespace {
// For replies that can never be TIMEOUT.
struct NoTimeoutExpected {
  const std::string& where;
  [[noreturn]] void operator()(const std::vector<std::string>&) const {
    throw IoError("store at " + where + " answered TIMEOUT to a request that does not wait");
  }
};
}  // namespace

void TcpStore::set(const std::string& key, const std::string& value) {
  std::string frame = FrameWriter(StoreOp::kSet).bytes(key).bytes(value).finish();
  std::lock_guard<std::mutex> lock(mutex_);
  connection_->call(frame, withSafetyMargin(timeout()),
                    [](PayloadReader& r) { r.expectEnd("SET reply"); },
                    NoTimeoutExpected{connection_->where()});
}

std::string TcpStore::get(const std::string& key) {
  auto wait_for = clampTimeout(timeout());
  std::string frame = FrameWriter(StoreOp::kGet).bytes(key).i64(wait_for.count()).finish();
  std::lock_guard<std::mutex> lock(mutex_);
  auto on_timeout = [&](const std::vector<std::string>&) {
    throw TimeoutError("store at " + connection_->where() + ": get of key '" + key +
                       "' timed out after " + std::to_string(wait_for.count()) +
                       " ms; the key was never set");
  };
  return connection_->call(frame, withSafetyMargin(wait_for),
                           [](PayloadReader& r) { return r.bytes("value"); }, on_timeout);
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::string frame = FrameWriter(StoreOp::kAdd).bytes(key).i64(delta).finish();
  std::lock_guard<std::mutex> lock(mutex_);
  return connection_->call(frame, withSafetyMargin(timeout()),
                           [](PayloadReader& r) { return r.i64("value"); },
                           NoTimeoutExpected{connection_->where()});
}

std::string TcpStore::compareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired) {
  std::string frame =
      FrameWriter(StoreOp::kCompareSet).bytes(key).bytes(expected).bytes(desired).finish();
  std::lock_guard<std::mutex> lock(mutex_);
  return connection_->call(frame, withSafetyMargin(timeout()),
                           [](PayloadReader& r) { return r.bytes("value"); },
                           NoTimeoutExpected{connection_->where()});
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  auto wait_for = clampTimeout(timeout);
  std::string frame = FrameWriter(StoreOp::kWait).strings(keys).i64(wait_for.count()).finish();
  std::lock_guard<std::mutex> lock(mutex_);
  auto on_timeout = [&](const std::vector<std::string>& missing) {
    throw TimeoutError("store at " + connection_->where() + ": wait timed out after " +
                       std::to_string(wait_for.count()) + " ms; keys never set: " +
                       joinKeys(missing));
  };
  connection_->call(frame, withSafetyMargin(wait_for),
                    [](PayloadReader& r) { r.expectEnd("WAIT reply"); }, on_timeout);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  std::string frame = FrameWriter(StoreOp::kCheck).strings(keys).finish();
  std::lock_guard<std::mutex> lock(mutex_);
  return connection_->call(frame, withSafetyMargin(timeout()),
                           [](PayloadReader& r) { return r.u8("present") != 0; },
                           NoTimeoutExpected{connection_->where()});
}

bool TcpStore::deleteKey(const std::string& key) {
  std::string frame = FrameWriter(StoreOp::kDeleteKey).bytes(key).finish();
  std::lock_guard<std::mutex> lock(mutex_);
  return connection_->call(frame, withSafetyMargin(timeout()),
                           [](PayloadReader& r) { return r.u8("existed") != 0; },
                           NoTimeoutExpected{connection_->where()});
}

int64_t TcpStore::numKeys() {
  std::string frame = FrameWriter(StoreOp::kNumKeys).finish();
  std::lock_guard<std::mutex> lock(mutex_);
  return connection_->call(frame, withSafetyMargin(timeout()),
                           [](PayloadReader& r) { return r.i64("count"); },
                           NoTimeoutExpected{connection_->where()});
}

}  // namespace dtrain
