// TcpStore: the client side. One connection per TcpStore, one request in
// flight at a time (a mutex serialises callers), replies read in order.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/socket.h"
#include "common/text.h"
#include "store/tcp_store.h"
#include "store/wire.h"

namespace dtrain {
namespace {

constexpr std::chrono::milliseconds kFirstBackoff{10};
constexpr std::chrono::milliseconds kMaxBackoff{1000};
// Timeouts are capped so that deadline arithmetic cannot overflow; a year is
// "forever" for a store.
// The server answers a timed-out wait itself; this client-side margin only
// catches a server that stopped answering at all.
std::chrono::milliseconds withSafetyMargin(std::chrono::milliseconds server_timeout) {
  server_timeout = clampTimeout(server_timeout);
  return server_timeout + std::chrono::seconds(2) + server_timeout / 10;
}

}  // namespace

class TcpStore::Connection {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Connection(const TcpStoreClientOptions& options)
      : options_(options), where_(hostPortText(options.host, options.port)), decoder_(kStoreMaxFrameBytes) {
    const auto deadline = Clock::now() + clampTimeout(options.connect_timeout);
    const auto greeting = std::min(clampTimeout(options.timeout), clampTimeout(options.request_timeout));
    connectAndGreet(
        deadline, [&] { return std::min(Clock::now() + withSafetyMargin(greeting), storeDeadline()); },
        [&](const std::string& error) {
          return TimeoutError("could not connect to the store at " + where_ + " within " +
                              secondsText(options_.connect_timeout) + " s: " + error);
        });
  }

  const std::string& where() const { return where_; }

  // Sends one request frame and hands the reply's fields (after an OK
  // status) to `parse`. A TIMEOUT reply calls `on_timeout(missing_keys)`,
  // which throws; ERROR replies and transport failures throw here.
  template <typename Parse, typename OnTimeout>
  auto call(const std::string& frame, Clock::time_point deadline, Parse&& parse, OnTimeout&& on_timeout) {
    reconnectIfBroken(deadline);
    PayloadReader reply(roundTrip(frame, deadline));
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
  template <typename MakeError>
  void connectWithRetry(Clock::time_point deadline, MakeError&& make_error) {
    auto backoff = kFirstBackoff;
    while (true) {
      auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                           std::chrono::milliseconds(0));
      ConnectAttempt attempt = connectTcpOnce(options_.host, options_.port, left);
      if (attempt.socket.valid()) {
        socket_ = std::move(attempt.socket);
        setNoDelay(socket_.get());
        setPeerSilenceLimit(socket_.get(), options_.liveness_timeout);
        decoder_ = FrameDecoder(kStoreMaxFrameBytes);
        return;
      }
      if (Clock::now() >= deadline) throw make_error(attempt.error);
      // The server may still be starting (rank 0 races its workers).
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
      backoff = std::min(backoff * 2, kMaxBackoff);
    }
  }

  // A server at its connection limit refuses with a reason; unlike a bad
  // token that is temporary, so the client tries again until its deadline.
  struct ServerFull {
    std::string message;
  };

  template <typename GreetDeadline, typename MakeError>
  void connectAndGreet(Clock::time_point deadline, GreetDeadline&& greet_deadline, MakeError&& make_error) {
    auto backoff = kFirstBackoff;
    while (true) {
      connectWithRetry(deadline, make_error);
      try {
        greet(greet_deadline());
        broken_.clear();
        return;
      } catch (const ServerFull& full) {
        if (Clock::now() >= deadline) throw make_error(full.message);
        std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
        backoff = std::min(backoff * 2, kMaxBackoff);
      }
    }
  }

  // After a failed request: connect and greet again within the caller's
  // deadline. A refusal (bad token) is final.
  void reconnectIfBroken(Clock::time_point deadline) {
    if (broken_.empty()) return;
    if (refused_) {
      throw ConfigError("store at " + where_ + " refused this client earlier: " + broken_);
    }
    const std::string why = broken_;
    const auto started = Clock::now();
    connectAndGreet(
        deadline, [deadline] { return deadline; },
        [&](const std::string& error) {
          return IoError("lost the connection to the store at " + where_ + " (" + why +
                         ") and could not connect again within " +
                         secondsText(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started)) +
                         " s: " + error);
        });
  }

  void greet(Clock::time_point deadline) {
    std::string hello =
        FrameWriter(StoreOp::kHello).u32(kStoreProtocolVersion).bytes(options_.token).finish();
    PayloadReader reply(roundTrip(hello, deadline));
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
    if (reason == RefusalReason::kTooManyConnections) {
      socket_.reset();
      throw ServerFull{"the server is at its connection limit: " + message};
    }
    refused_ = true;
    if (reason == RefusalReason::kAuthentication) {
      throw ConfigError("store at " + where_ +
                        " refused the connection: authentication failed (check "
                        "DTRAIN_STORE_TOKEN / DTRAIN_STORE_TOKEN_FILE)");
    }
    throw ConfigError("store at " + where_ + " refused the connection: " + message);
  }

  std::string_view roundTrip(const std::string& frame, Clock::time_point deadline) {
    if (frame.size() - 4 > kStoreMaxFrameBytes) {
      throw ConfigError("a store request of " + std::to_string(frame.size() - 4) +
                        " bytes exceeds the frame limit of " + std::to_string(kStoreMaxFrameBytes) +
                        " bytes (store at " + where_ + ")");
    }
    const auto started = Clock::now();
    try {
      if (!sendAll(socket_.get(), frame, deadline)) timedOut(started);
      while (true) {
        if (auto payload = decoder_.next()) return *payload;
        if (!pollUntil(socket_.get(), POLLIN, deadline)) timedOut(started);
        constexpr size_t kChunk = 64 * 1024;
        ssize_t n = ::recv(socket_.get(), decoder_.prepare(kChunk), kChunk, 0);
        if (n > 0) {
          decoder_.commit(static_cast<size_t>(n));
        } else if (n == 0) {
          fail("the server closed the connection");
        } else if (errno == ETIMEDOUT) {
          fail("the server stopped answering for " + secondsText(options_.liveness_timeout) +
               " s (host down or network partitioned?)");
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
  // next request, so this connection is given up (the next request makes
  // a new one).
  [[noreturn]] void timedOut(Clock::time_point started) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    broken_ = "an earlier request got no reply within " + secondsText(waited) + " s";
    socket_.reset();
    throw TimeoutError("the store at " + where_ + " did not reply within " + secondsText(waited) + " s");
  }

  [[noreturn]] void fail(const std::string& why) {
    broken_ = why;
    socket_.reset();
    throw IoError("lost the connection to the store at " + where_ + ": " + why);
  }

  const TcpStoreClientOptions options_;
  std::string where_;
  FileDescriptor socket_;
  FrameDecoder decoder_;
  std::string broken_;   // why the connection can no longer be used; empty while healthy
  bool refused_ = false;  // the server refused this client: reconnecting cannot help
};

TcpStore::TcpStore(const TcpStoreClientOptions& options)
    : options_(options), connection_(std::make_unique<Connection>(options)) {
  setTimeout(options.timeout);
}

TcpStore::~TcpStore() = default;

namespace {
using Clock = std::chrono::steady_clock;

// For replies that can never be TIMEOUT.
struct NoTimeoutExpected {
  const std::string& where;
  [[noreturn]] void operator()(const std::vector<std::string>&) const {
    throw IoError("store at " + where + " answered TIMEOUT to a request that does not wait");
  }
};
}  // namespace

// The deadline of a request that does not wait for keys.
TcpStore::Clock::time_point TcpStore::requestDeadline() const {
  return std::min(Clock::now() + clampTimeout(options_.request_timeout), storeDeadline());
}

std::unique_lock<std::timed_mutex> TcpStore::lockBy(Clock::time_point deadline) {
  std::unique_lock<std::timed_mutex> lock(mutex_, std::defer_lock);
  if (!lock.try_lock_until(deadline)) {
    throw TimeoutError("store at " + connection_->where() +
                       ": this client's previous request was still unanswered at this request's "
                       "deadline (is the store reachable?)");
  }
  return lock;
}

TcpStore::WaitBudget TcpStore::waitBudget(std::chrono::milliseconds timeout) const {
  // The server answers a timed-out wait itself; the client's deadline adds a
  // margin that only catches a server that stopped answering. Inside a
  // StoreDeadlineScope the server is asked to give up a little earlier.
  WaitBudget budget;
  budget.server_wait = clampTimeout(timeout);
  const auto now = Clock::now();
  budget.reply_deadline = now + withSafetyMargin(budget.server_wait);
  const auto scope = storeDeadline();
  if (scope < budget.reply_deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(scope - now);
    budget.server_wait = std::clamp(std::min(budget.server_wait, left - left / 5),
                                    std::chrono::milliseconds(0), budget.server_wait);
    budget.reply_deadline = scope;
  }
  return budget;
}

void TcpStore::set(const std::string& key, const std::string& value) {
  std::string frame = FrameWriter(StoreOp::kSet).bytes(key).bytes(value).finish();
  const auto deadline = requestDeadline();
  auto lock = lockBy(deadline);
  connection_->call(frame, deadline, [](PayloadReader& r) { r.expectEnd("SET reply"); },
                    NoTimeoutExpected{connection_->where()});
}

std::string TcpStore::get(const std::string& key) {
  const WaitBudget budget = waitBudget(timeout());
  std::string frame = FrameWriter(StoreOp::kGet).bytes(key).i64(budget.server_wait.count()).finish();
  auto lock = lockBy(budget.reply_deadline);
  auto on_timeout = [&](const std::vector<std::string>&) {
    throw TimeoutError("store at " + connection_->where() + ": get of key '" + key +
                       "' timed out after " + std::to_string(budget.server_wait.count()) +
                       " ms; the key was never set");
  };
  return connection_->call(frame, budget.reply_deadline,
                           [](PayloadReader& r) { return r.bytes("value"); }, on_timeout);
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::string frame = FrameWriter(StoreOp::kAdd).bytes(key).i64(delta).finish();
  const auto deadline = requestDeadline();
  auto lock = lockBy(deadline);
  return connection_->call(frame, deadline, [](PayloadReader& r) { return r.i64("value"); },
                           NoTimeoutExpected{connection_->where()});
}

std::string TcpStore::compareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired) {
  std::string frame =
      FrameWriter(StoreOp::kCompareSet).bytes(key).bytes(expected).bytes(desired).finish();
  const auto deadline = requestDeadline();
  auto lock = lockBy(deadline);
  return connection_->call(frame, deadline, [](PayloadReader& r) { return r.bytes("value"); },
                           NoTimeoutExpected{connection_->where()});
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const WaitBudget budget = waitBudget(timeout);
  std::string frame = FrameWriter(StoreOp::kWait).strings(keys).i64(budget.server_wait.count()).finish();
  auto lock = lockBy(budget.reply_deadline);
  auto on_timeout = [&](const std::vector<std::string>& missing) {
    throw TimeoutError("store at " + connection_->where() + ": wait timed out after " +
                       std::to_string(budget.server_wait.count()) + " ms; keys never set: " +
                       joined(missing));
  };
  connection_->call(frame, budget.reply_deadline, [](PayloadReader& r) { r.expectEnd("WAIT reply"); },
                    on_timeout);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  std::string frame = FrameWriter(StoreOp::kCheck).strings(keys).finish();
  const auto deadline = requestDeadline();
  auto lock = lockBy(deadline);
  return connection_->call(frame, deadline, [](PayloadReader& r) { return r.u8("present") != 0; },
                           NoTimeoutExpected{connection_->where()});
}

void TcpStore::setEphemeral(const std::string& key, const std::string& value) {
  std::string frame = FrameWriter(StoreOp::kSetEphemeral).bytes(key).bytes(value).finish();
  const auto deadline = requestDeadline();
  auto lock = lockBy(deadline);
  connection_->call(frame, deadline, [](PayloadReader& r) { r.expectEnd("SET_EPHEMERAL reply"); },
                    NoTimeoutExpected{connection_->where()});
}

bool TcpStore::deleteKey(const std::string& key) {
  std::string frame = FrameWriter(StoreOp::kDeleteKey).bytes(key).finish();
  const auto deadline = requestDeadline();
  auto lock = lockBy(deadline);
  return connection_->call(frame, deadline, [](PayloadReader& r) { return r.u8("existed") != 0; },
                           NoTimeoutExpected{connection_->where()});
}

int64_t TcpStore::numKeys() {
  std::string frame = FrameWriter(StoreOp::kNumKeys).finish();
  const auto deadline = requestDeadline();
  auto lock = lockBy(deadline);
  return connection_->call(frame, deadline, [](PayloadReader& r) { return r.i64("count"); },
                           NoTimeoutExpected{connection_->where()});
}

}  // namespace dtrain
