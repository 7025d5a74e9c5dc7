// StoreRequestHandler: the TcpStoreServer's key-value table and its deferred
// waits, with no I/O (private to store/). The server's event loop feeds it
// request payloads and ships the reply frames it returns; tests drive it with
// a fake clock.
//
// A GET of a missing key and a WAIT for missing keys are deferred: handle()
// returns no reply, and the reply comes later from takeCompleted() (the keys
// were set) or expire() (the request's deadline passed: a TIMEOUT reply naming
// the missing keys). Either way every request gets exactly one reply, in
// order, so a connection never desyncs. A client has at most one deferred
// request; the server reads no further requests from it until it is answered.
//
// Work is bounded so one client cannot stall the others: a request names at
// most max_keys_per_request keys (more is an ERROR reply naming the limit,
// and the connection stays usable), and a key written costs time in the
// number of requests waiting on that key, not in the keys they wait for.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "store/wire.h"

namespace dtrain {

using ClientId = uint64_t;

inline constexpr size_t kDefaultMaxKeysPerRequest = 65536;

struct StoreReply {
  ClientId client;
  std::string frame;
};

class StoreRequestHandler {
 public:
  using Clock = std::chrono::steady_clock;

  StoreRequestHandler() = default;
  explicit StoreRequestHandler(size_t max_keys_per_request)
      : max_keys_per_request_(max_keys_per_request) {}

  // Executes one request payload (op byte + fields; not HELLO, which the
  // connection handles) from `client`. Returns the reply frame, or nullopt
  // when the request was deferred. Throws WireError for a malformed request
  // (truncated field, unknown op, trailing bytes); the table is unchanged then.
  std::optional<std::string> handle(ClientId client, std::string_view payload, Clock::time_point now);

  // Replies to deferred requests satisfied since the last call.
  std::vector<StoreReply> takeCompleted();
  // TIMEOUT replies for deferred requests whose deadline is <= now. Stops
  // early once the requests it answered named `max_keys` keys in all (the
  // caller calls again: nextDeadline() is still <= now then).
  std::vector<StoreReply> expire(Clock::time_point now, size_t max_keys = SIZE_MAX);
  // The earliest deadline of a deferred request, if any.
  std::optional<Clock::time_point> nextDeadline() const;
  bool isDeferred(ClientId client) const { return deferred_.count(client) != 0; }
  // The client's connection closed: drops its deferred request and deletes
  // the keys it set with SET_EPHEMERAL (and still owns: a later SET or
  // SET_EPHEMERAL of the key by anyone, or its deletion, ends that).
  void forget(ClientId client);

  size_t numKeys() const { return data_.size(); }
  size_t maxKeysPerRequest() const { return max_keys_per_request_; }

 private:
  struct Deferred {
    StoreOp op;
    std::vector<std::string> keys;
    size_t missing;  // distinct keys of the request not in the table
    int64_t timeout_ms;
    std::multimap<Clock::time_point, ClientId>::iterator deadline;
  };

  // The `field` list of an op, or an ERROR reply when it names more keys
  // than a request may (checked before a single key is copied).
  std::optional<std::string> readKeys(PayloadReader& in, const char* op_name,
                                      std::vector<std::string>& keys) const;
  void put(const std::string& key, std::string value);
  bool erase(const std::string& key);
  std::string handleAdd(std::string key, int64_t delta);
  std::string handleCompareSet(std::string key, const std::string& expected, std::string desired);
  std::optional<std::string> deferUnlessPresent(ClientId client, StoreOp op,
                                                std::vector<std::string> keys,
                                                int64_t timeout_ms, Clock::time_point now);
  std::string satisfiedReply(StoreOp op, const std::vector<std::string>& keys) const;
  bool allPresent(const std::vector<std::string>& keys) const;
  std::vector<std::string> missingKeys(const std::vector<std::string>& keys) const;
  // A key appeared: completes the requests it was the last missing key of.
  void keyCreated(const std::string& key);
  // A key went away: the requests waiting on it miss one key more.
  void keyRemoved(const std::string& key);
  // Removes the deferred request from every index; returns it.
  Deferred release(ClientId client);
  // The key is no longer deleted with its owner's connection.
  void disown(const std::string& key);

  size_t max_keys_per_request_ = kDefaultMaxKeysPerRequest;
  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<ClientId, Deferred> deferred_;
  std::unordered_map<std::string, std::unordered_set<ClientId>> waiters_by_key_;
  std::multimap<Clock::time_point, ClientId> deadlines_;
  std::vector<StoreReply> completed_;
  std::unordered_map<ClientId, std::unordered_set<std::string>> owned_keys_;  // SET_EPHEMERAL keys
  std::unordered_map<std::string, ClientId> owner_of_;
};

}  // namespace dtrain
