// EtcdStore: the Store kept in an etcd cluster (v3.4 or later), so that the
// store survives the loss of any one node: every etcd member can serve every
// request, and the store moves to another member when the one it uses fails.
//
// It speaks etcd's v3 JSON gateway over plain HTTP (POST /v3/kv/..., keys
// and values base64 in JSON). Every key is stored as key_prefix + key.
//
// Beyond the Store contract (store.h):
// - Failover: a request that fails on one endpoint (no connection, no reply
//   within request_timeout, HTTP 5xx, etcd "unavailable") is sent to the next
//   one, round after round with a short backoff, until the call's deadline
//   (call_timeout for calls that do not wait, the wait's own timeout for
//   get()/wait(), either shortened by a StoreDeadlineScope); then IoError "lost the connection to etcd (tried A, B, C)
//   while <what>: <last error>". Requests go to the endpoint that last
//   answered; they do not rotate. When the leader dies, a member that has not
//   noticed yet holds requests for it, so the first request after that waits
//   out request_timeout before it moves on (by then a new leader is elected):
//   request_timeout is how long failing over may take.
// - add() and compareSet() read the key, then write it in a transaction that
//   compares its mod_revision (create_revision 0 for an absent key), and
//   start over when another client wrote in between. A write whose reply was
//   lost is recognised when it is retried: for add(), the key's next version
//   holding exactly the value this call meant to write is taken as its own.
//   (etcd keeps no writer ids; only a concurrent add() of the same delta from
//   the same value, landing while this call's reply was lost, is mistaken.)
//   deleteKey() retried after a lost reply may report false for a key it
//   deleted itself.
// - get() and wait() poll (10 ms growing to 100 ms); check() asks once.
// - Safe to call from several threads: each request takes a kept-alive
//   connection of its own from a small pool per endpoint.
// - Values are limited by etcd's --max-request-bytes (1.5 MiB by default,
//   which after base64 leaves a little over 1 MiB for a value).
// - ConfigError: bad endpoints; etcd refusing a request as invalid or
//   unauthorised. IoError: lost connection, an expired lease. TimeoutError:
//   get()/wait() deadlines, no endpoint answering within connect_timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store/store.h"

namespace dtrain {

namespace etcd {
class Gateway;
}  // namespace etcd

struct EtcdStoreOptions {
  // "host:port" each; IPv6 literals bracketed ("[fd00::1]:2379").
  std::vector<std::string> endpoints;
  // Every key is stored under it; numKeys() counts the keys under it.
  std::string key_prefix = "/dtrain/";
  // One HTTP request, connecting included. (cpp-httplib bounds the connect,
  // the send and each wait for the reply by it; etcd's small replies come in
  // one piece.)
  std::chrono::milliseconds request_timeout{std::chrono::seconds(5)};
  // The constructor retries until some endpoint answers, then TimeoutError
  // naming every endpoint.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  // Default timeout of get()/wait().
  std::chrono::milliseconds timeout = Store::kDefaultTimeout;
  // The deadline of every call that does not wait for keys, failing over
  // included (a StoreDeadlineScope may shorten it, and get()/wait() too).
  std::chrono::milliseconds call_timeout{std::chrono::seconds(30)};
  // setEphemeral(): the TTL of this client's session lease. Each
  // setEphemeral() renews it; a client that stops calling (killed) loses
  // its ephemeral keys that long after its last call, a destroyed one at once.
  std::chrono::milliseconds session_ttl{std::chrono::seconds(15)};
};

// "10.0.0.1:2379,10.0.0.2:2379" (an "http://" before an entry is allowed,
// spaces around entries are ignored) -> {"10.0.0.1:2379", "10.0.0.2:2379"}.
// ConfigError naming the input and what was expected for an empty entry, an
// https:// one, or one without a valid port.
std::vector<std::string> parseEtcdEndpoints(const std::string& text);

class EtcdStore : public Store {
 public:
  explicit EtcdStore(const EtcdStoreOptions& options);
  ~EtcdStore() override;
  EtcdStore(const EtcdStore&) = delete;
  EtcdStore& operator=(const EtcdStore&) = delete;

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
  // set() under this client's session lease (granted on first use, renewed
  // by every call, revoked by the destructor).
  void setEphemeral(const std::string& key, const std::string& value) override;

  // Leases, for keep-alives: a key set with a lease disappears when the lease
  // is revoked or expires (ttl without a keepAliveLease; etcd rounds ttl up
  // to whole seconds and to its minimum, 1.5 election timeouts).
  int64_t grantLease(std::chrono::milliseconds ttl);
  // Renews the lease; returns the TTL it has now. IoError saying the lease
  // expired when etcd no longer has it.
  std::chrono::milliseconds keepAliveLease(int64_t lease);
  // A lease that is already gone is not an error.
  void revokeLease(int64_t lease);
  // IoError saying the lease expired when etcd no longer has it.
  void setWithLease(const std::string& key, const std::string& value, int64_t lease);

  // "etcd at A,B,C", for messages.
  const std::string& describe() const;
  const std::vector<std::string>& endpoints() const;
  // The endpoint requests go to now: the last one that answered.
  std::string currentEndpoint() const;
  const std::string& keyPrefix() const { return key_prefix_; }

 private:
  std::string etcdKey(const std::string& key) const { return key_prefix_ + key; }

  std::string key_prefix_;
  std::chrono::milliseconds call_timeout_;
  std::chrono::milliseconds session_ttl_;
  std::mutex session_mutex_;
  int64_t session_lease_ = 0;  // 0: none yet; guarded by session_mutex_
  std::unique_ptr<etcd::Gateway> gateway_;
};

}  // namespace dtrain
