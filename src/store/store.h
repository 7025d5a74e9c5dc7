// The rendezvous key-value store (store/). No torch, no CUDA.
//
// Contract, shared by every implementation (TcpStore, PrefixStore, HashStore):
// - Keys are strings; values are byte strings (std::string holds bytes).
// - get() blocks until the key exists or the store's timeout passes
//   (TimeoutError naming the key), like c10d's TCPStore::get.
// - add() creates the key at 0 if absent, adds `delta` atomically and returns
//   the new value; the value is stored as decimal text, so get() of a counter
//   returns e.g. "3".
// - compareSet(): if the key's current value equals `expected` (an absent key
//   matches an empty `expected`), it becomes `desired`. Returns the value after
//   the call (desired on success, the current value otherwise).
// - wait(keys, timeout) returns when all keys exist; TimeoutError naming the
//   missing keys otherwise.
// - All methods are safe to call from several threads.
// - Failures: TimeoutError (deadline), IoError (connection lost), ConfigError
//   (refused: bad token, protocol version).
// - No call blocks without a deadline: a request that does not wait for keys
//   is bounded by the implementation's request timeout, get()/wait() by
//   their timeout, and a StoreDeadlineScope bounds every call its thread
//   makes (waiting for another thread's request on a shared connection
//   included) by an earlier deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dtrain {

class Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::seconds(300)};

  virtual ~Store() = default;

  virtual void set(const std::string& key, const std::string& value) = 0;
  virtual std::string get(const std::string& key) = 0;
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  virtual std::string compareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired) = 0;
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }
  // True when all keys exist; never blocks.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // True when the key existed.
  virtual bool deleteKey(const std::string& key) = 0;
  virtual int64_t numKeys() = 0;
  // set(), and the key is deleted when this client goes away: for a
  // TcpStore, when its connection to the server closes (the process
  // exited or died, or the connection failed). A presence flag peers can
  // watch (see KeepAlive). The default (stores with no connection) is set().
  virtual void setEphemeral(const std::string& key, const std::string& value) { set(key, value); }

  std::chrono::milliseconds timeout() const { return timeout_; }
  void setTimeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

 protected:
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
};

// Bounds every store request the constructing thread makes while the scope
// lives, whatever the store's own timeouts: a thread that must report
// promptly (a failure diagnosis, a heartbeat) cannot be held by an
// unreachable store or by another thread's request. Nested scopes keep the
// earliest deadline. Implementations read it with storeDeadline().
class StoreDeadlineScope {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StoreDeadlineScope(std::chrono::milliseconds budget);
  ~StoreDeadlineScope();
  StoreDeadlineScope(const StoreDeadlineScope&) = delete;
  StoreDeadlineScope& operator=(const StoreDeadlineScope&) = delete;

 private:
  Clock::time_point previous_;
};

// The earliest deadline of this thread's StoreDeadlineScopes, or
// time_point::max() outside any.
std::chrono::steady_clock::time_point storeDeadline();

// `timeout` within [0, a year]: a caller's "forever" (milliseconds::max())
// added to a clock's now() would overflow.
std::chrono::milliseconds clampTimeout(std::chrono::milliseconds timeout);

// A counting barrier over a store: every one of `world_size` callers adds 1 to
// `<name>/count` and waits for `<name>/done`, set by the last to arrive.
// Each name must be used for one barrier only (prefix it with a generation).
void storeBarrier(Store& store, const std::string& name, int world_size,
                  std::chrono::milliseconds timeout);

}  // namespace dtrain
