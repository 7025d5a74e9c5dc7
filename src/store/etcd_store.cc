// EtcdStore: the Store contract over etcd's v3 JSON gateway. The requests and
// their failover are etcd_gateway.cc's; this file says what each Store call
// asks of etcd.
#include "store/etcd_store.h"

#include <algorithm>
#include <random>
#include <thread>

#include "common/error.h"
#include "common/settings.h"
#include "common/text.h"
#include "store/etcd_gateway.h"

namespace dtrain {
namespace {

using etcd::base64Encode;
using etcd::Clock;
using etcd::int64Field;
using nlohmann::json;
using std::chrono::milliseconds;

constexpr milliseconds kFirstPoll{10};
constexpr milliseconds kMaxPoll{100};
// etcd's default --max-txn-ops: how many keys one wait()/check() request reads.
constexpr size_t kMaxTxnOps = 128;

// gRPC codes etcd refuses with for good (etcd_gateway.h retries the others).
constexpr int kGrpcInvalidArgument = 3;
constexpr int kGrpcNotFound = 5;
constexpr int kGrpcPermissionDenied = 7;
constexpr int kGrpcUnauthenticated = 16;

// Bounded by the caller's StoreDeadlineScope too.
Clock::time_point deadlineAfter(milliseconds timeout) {
  return std::min(Clock::now() + clampTimeout(timeout), storeDeadline());
}

void pause(milliseconds& poll, Clock::time_point deadline) {
  std::this_thread::sleep_for(std::min<Clock::duration>(poll, deadline - Clock::now()));
  poll = std::min(poll * 2, kMaxPoll);
}

// After a transaction lost to another client's write: a random pause that
// grows with the losses, so that many clients adding to one counter take
// turns instead of all retrying (and all but one losing) at once.
void backOffAfterConflict(int conflicts, Clock::time_point deadline) {
  thread_local std::minstd_rand random(std::random_device{}());
  const int64_t limit_us = std::min<int64_t>(int64_t{1000} << std::min(conflicts, 8), 20000);
  const auto pause = std::chrono::microseconds(std::uniform_int_distribution<int64_t>(0, limit_us)(random));
  std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
}

// etcd's range_end for "every key starting with `prefix`".
std::string prefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<unsigned char>(prefix.back()) != 0xff) {
      prefix.back() = static_cast<char>(prefix.back() + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // "from the key on", and the key is the smallest
}

// Throws for a reply in which etcd refused the request.
void requireOk(const etcd::Reply& reply, const std::string& where, const std::string& what) {
  if (reply.code == 0) return;
  const std::string text =
      where + " refused " + what + ": " + reply.message + " (gRPC code " + std::to_string(reply.code) + ")";
  if (reply.code == kGrpcInvalidArgument || reply.code == kGrpcPermissionDenied ||
      reply.code == kGrpcUnauthenticated) {
    throw ConfigError(text);
  }
  throw IoError(text);
}

struct KeyValue {
  bool exists = false;
  std::string value;
  int64_t mod_revision = 0;
  int64_t version = 0;
};

// The one key of a RangeResponse.
KeyValue keyValueOf(const json& range, const std::string& key) {
  KeyValue kv;
  auto kvs = range.find("kvs");
  if (kvs == range.end() || !kvs->is_array() || kvs->empty()) return kv;
  const json& first = kvs->front();
  kv.exists = true;
  kv.value = etcd::base64Decode(first.value("value", ""), "the value of key '" + key + "'");
  kv.mod_revision = int64Field(first, "mod_revision");
  kv.version = int64Field(first, "version");
  return kv;
}

json rangeOf(const std::string& key) { return {{"key", base64Encode(key)}}; }

// A RangeRequest counting the keys that start with `prefix`.
json countUnder(const std::string& prefix) {
  return {{"key", base64Encode(prefix.empty() ? std::string(1, '\0') : prefix)},
          {"range_end", base64Encode(prefixEnd(prefix))},
          {"count_only", true}};
}

json putOf(const std::string& key, const std::string& value, int64_t lease = 0) {
  json put = {{"key", base64Encode(key)}, {"value", base64Encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return put;
}

// A transaction that writes `value` if the key is still as read (same
// mod_revision, or still absent) and otherwise reads it again.
json writeIfUnchanged(const std::string& key, const KeyValue& read, const std::string& value) {
  json compare = {{"key", base64Encode(key)}, {"result", "EQUAL"}};
  if (read.exists) {
    compare["target"] = "MOD";
    compare["mod_revision"] = std::to_string(read.mod_revision);
  } else {
    compare["target"] = "CREATE";
    compare["create_revision"] = "0";
  }
  return {{"compare", json::array({compare})},
          {"success", json::array({{{"request_put", putOf(key, value)}}})},
          {"failure", json::array({{{"request_range", rangeOf(key)}}})}};
}

// The responses of a transaction, one per request it made.
const json& txnResponses(const json& body, size_t expected, const std::string& where) {
  auto responses = body.find("responses");
  if (responses == body.end() || !responses->is_array() || responses->size() != expected) {
    throw IoError(where + " answered a transaction of " + std::to_string(expected) +
                  " requests with: " + body.dump().substr(0, 300));
  }
  return *responses;
}

}  // namespace

std::vector<std::string> parseEtcdEndpoints(const std::string& text) {
  std::vector<std::string> endpoints;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view entry = std::string_view(text).substr(start, comma - start);
    endpoints.push_back(etcd::parseEndpoint(entry, text).text);
    if (comma == std::string::npos) return endpoints;
    start = comma + 1;
  }
}

EtcdStore::EtcdStore(const EtcdStoreOptions& options)
    : key_prefix_(options.key_prefix), call_timeout_(options.call_timeout), session_ttl_(options.session_ttl) {
  if (options.endpoints.empty()) {
    throw ConfigError("the etcd store has no endpoints; expected host:port entries, e.g. 10.0.0.1:2379");
  }
  std::string input;
  for (const auto& endpoint : options.endpoints) input += (input.empty() ? "" : ",") + endpoint;
  std::vector<etcd::Endpoint> endpoints;
  for (const auto& endpoint : options.endpoints) endpoints.push_back(etcd::parseEndpoint(endpoint, input));
  if (options.request_timeout <= milliseconds(0)) {
    throw ConfigError("the etcd store's request timeout must be positive, not " +
                      std::to_string(options.request_timeout.count()) + " ms");
  }
  gateway_ = std::make_unique<etcd::Gateway>(std::move(endpoints), clampTimeout(options.request_timeout));
  setTimeout(options.timeout);
  // A linearizable read: answered only where the cluster has a leader.
  requireOk(gateway_->connect("/v3/kv/range", countUnder(key_prefix_), clampTimeout(options.connect_timeout)),
            describe(), "a first read");
}

EtcdStore::~EtcdStore() {
  std::lock_guard<std::mutex> lock(session_mutex_);
  if (session_lease_ == 0) return;
  // A clean exit takes this client's ephemeral keys with it at once (a
  // killed process's go when the lease runs out).
  try {
    StoreDeadlineScope bounded(std::chrono::seconds(2));
    revokeLease(session_lease_);
  } catch (const std::exception&) {
    // etcd out of reach: the lease expires by itself.
  }
}

void EtcdStore::setEphemeral(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(session_mutex_);
  if (session_lease_ != 0) {
    try {
      keepAliveLease(session_lease_);
    } catch (const IoError&) {
      session_lease_ = 0;  // expired (this client was out of touch): take a new one
    }
  }
  if (session_lease_ == 0) session_lease_ = grantLease(session_ttl_);
  setWithLease(key, value, session_lease_);
}

const std::string& EtcdStore::describe() const { return gateway_->describe(); }
const std::vector<std::string>& EtcdStore::endpoints() const { return gateway_->endpointTexts(); }
std::string EtcdStore::currentEndpoint() const { return gateway_->currentEndpoint(); }

void EtcdStore::set(const std::string& key, const std::string& value) {
  const std::string what = "setting key '" + etcdKey(key) + "'";
  requireOk(gateway_->post("/v3/kv/put", putOf(etcdKey(key), value), deadlineAfter(call_timeout_), what),
            describe(), what);
}

std::string EtcdStore::get(const std::string& key) {
  const std::string etcd_key = etcdKey(key);
  const std::string what = "getting key '" + etcd_key + "'";
  const milliseconds wait_for = clampTimeout(timeout());
  const auto deadline = deadlineAfter(wait_for);
  milliseconds poll = kFirstPoll;
  while (true) {
    etcd::Reply reply = gateway_->post("/v3/kv/range", rangeOf(etcd_key), deadline, what);
    requireOk(reply, describe(), what);
    KeyValue kv = keyValueOf(reply.body, etcd_key);
    if (kv.exists) return kv.value;
    if (Clock::now() >= deadline) {
      throw TimeoutError(describe() + ": get of key '" + etcd_key + "' timed out after " +
                         std::to_string(wait_for.count()) + " ms; the key was never set");
    }
    pause(poll, deadline);
  }
}

int64_t EtcdStore::add(const std::string& key, int64_t delta) {
  const std::string etcd_key = etcdKey(key);
  const std::string what = "adding to key '" + etcd_key + "'";
  const auto deadline = deadlineAfter(call_timeout_);
  etcd::Reply read = gateway_->post("/v3/kv/range", rangeOf(etcd_key), deadline, what);
  requireOk(read, describe(), what);
  KeyValue current = keyValueOf(read.body, etcd_key);
  int conflicts = 0;
  while (true) {
    const int64_t base = current.exists ? parseInt64(current.value, "store counter '" + etcd_key + "'") : 0;
    int64_t next = 0;
    if (__builtin_add_overflow(base, delta, &next)) {
      throw ConfigError("store counter '" + etcd_key + "': " + std::to_string(base) + " + " +
                        std::to_string(delta) + " overflows a 64-bit integer");
    }
    const std::string next_text = std::to_string(next);
    etcd::Reply reply =
        gateway_->post("/v3/kv/txn", writeIfUnchanged(etcd_key, current, next_text), deadline, what);
    requireOk(reply, describe(), what);
    if (reply.body.value("succeeded", false)) return next;
    KeyValue seen = keyValueOf(
        txnResponses(reply.body, 1, describe())[0].value("response_range", json::object()), etcd_key);
    // An earlier attempt may have written and lost its reply: the key's next
    // version holding exactly our value is taken for that write.
    if (reply.may_have_applied_before && seen.exists && seen.version == current.version + 1 &&
        seen.value == next_text) {
      return next;
    }
    current = std::move(seen);  // another client wrote in between
    backOffAfterConflict(++conflicts, deadline);
  }
}

std::string EtcdStore::compareSet(const std::string& key, const std::string& expected,
                                  const std::string& desired) {
  const std::string etcd_key = etcdKey(key);
  const std::string what = "compare-and-set of key '" + etcd_key + "'";
  const auto deadline = deadlineAfter(call_timeout_);
  etcd::Reply read = gateway_->post("/v3/kv/range", rangeOf(etcd_key), deadline, what);
  requireOk(read, describe(), what);
  KeyValue current = keyValueOf(read.body, etcd_key);
  while (true) {
    // An absent key matches only an empty `expected`, and is then left absent (c10d).
    if (!current.exists && !expected.empty()) return expected;
    if (current.exists && current.value != expected) return current.value;
    etcd::Reply reply =
        gateway_->post("/v3/kv/txn", writeIfUnchanged(etcd_key, current, desired), deadline, what);
    requireOk(reply, describe(), what);
    if (reply.body.value("succeeded", false)) return desired;
    // Changed in between (by another client, or by this call's own write
    // whose reply was lost: then it now holds `desired`, which is returned).
    current = keyValueOf(txnResponses(reply.body, 1, describe())[0].value("response_range", json::object()),
                         etcd_key);
  }
}

namespace {

// The keys of `keys` (etcd keys) that do not exist, read in transactions of
// up to kMaxTxnOps ranges.
std::vector<std::string> missingKeys(etcd::Gateway& gateway, const std::vector<std::string>& keys,
                                     Clock::time_point deadline, const std::string& what) {
  std::vector<std::string> missing;
  for (size_t start = 0; start < keys.size(); start += kMaxTxnOps) {
    const size_t count = std::min(kMaxTxnOps, keys.size() - start);
    json ranges = json::array();
    for (size_t i = 0; i < count; ++i) {
      json range = rangeOf(keys[start + i]);
      range["count_only"] = true;
      ranges.push_back({{"request_range", range}});
    }
    etcd::Reply reply = gateway.post("/v3/kv/txn", {{"success", ranges}}, deadline, what);
    requireOk(reply, gateway.describe(), what);
    const json& responses = txnResponses(reply.body, count, gateway.describe());
    for (size_t i = 0; i < count; ++i) {
      if (int64Field(responses[i].value("response_range", json::object()), "count") == 0) {
        missing.push_back(keys[start + i]);
      }
    }
  }
  return missing;
}

}  // namespace

void EtcdStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  if (keys.empty()) return;
  std::vector<std::string> etcd_keys;
  for (const auto& key : keys) etcd_keys.push_back(etcdKey(key));
  const milliseconds wait_for = clampTimeout(timeout);
  const auto deadline = deadlineAfter(wait_for);
  milliseconds poll = kFirstPoll;
  while (true) {
    std::vector<std::string> missing = missingKeys(*gateway_, etcd_keys, deadline, "waiting for keys");
    if (missing.empty()) return;
    if (Clock::now() >= deadline) {
      throw TimeoutError(describe() + ": wait timed out after " + std::to_string(wait_for.count()) +
                         " ms; keys never set: " + joined(missing));
    }
    pause(poll, deadline);
  }
}

bool EtcdStore::check(const std::vector<std::string>& keys) {
  if (keys.empty()) return true;
  std::vector<std::string> etcd_keys;
  for (const auto& key : keys) etcd_keys.push_back(etcdKey(key));
  return missingKeys(*gateway_, etcd_keys, deadlineAfter(call_timeout_), "checking keys").empty();
}

bool EtcdStore::deleteKey(const std::string& key) {
  const std::string what = "deleting key '" + etcdKey(key) + "'";
  etcd::Reply reply =
      gateway_->post("/v3/kv/deleterange", rangeOf(etcdKey(key)), deadlineAfter(call_timeout_), what);
  requireOk(reply, describe(), what);
  return int64Field(reply.body, "deleted") > 0;
}

int64_t EtcdStore::numKeys() {
  const std::string what = "counting the keys under '" + key_prefix_ + "'";
  etcd::Reply reply = gateway_->post("/v3/kv/range", countUnder(key_prefix_), deadlineAfter(call_timeout_), what);
  requireOk(reply, describe(), what);
  return int64Field(reply.body, "count");
}

int64_t EtcdStore::grantLease(milliseconds ttl) {
  const int64_t seconds = std::max<int64_t>(1, (clampTimeout(ttl).count() + 999) / 1000);
  const std::string what = "granting a lease of " + std::to_string(seconds) + " s";
  etcd::Reply reply =
      gateway_->post("/v3/lease/grant", {{"TTL", std::to_string(seconds)}}, deadlineAfter(call_timeout_), what);
  requireOk(reply, describe(), what);
  const int64_t lease = int64Field(reply.body, "ID");
  if (lease == 0) throw IoError(describe() + " granted a lease without an ID: " + reply.body.dump());
  return lease;
}

namespace {
[[noreturn]] void leaseExpired(const std::string& where, int64_t lease, const std::string& what) {
  throw IoError(where + ": lease " + std::to_string(lease) +
                " expired (etcd no longer has it; its keys are gone) while " + what);
}
}  // namespace

milliseconds EtcdStore::keepAliveLease(int64_t lease) {
  const std::string what = "renewing lease " + std::to_string(lease);
  etcd::Reply reply =
      gateway_->post("/v3/lease/keepalive", {{"ID", std::to_string(lease)}}, deadlineAfter(call_timeout_), what);
  if (reply.code == kGrpcNotFound) leaseExpired(describe(), lease, what);
  requireOk(reply, describe(), what);
  // A streaming call: its one answer comes as {"result": {...}}.
  const int64_t ttl = int64Field(reply.body.value("result", json::object()), "TTL");
  if (ttl <= 0) leaseExpired(describe(), lease, what);
  return milliseconds(ttl * 1000);
}

void EtcdStore::revokeLease(int64_t lease) {
  const std::string what = "revoking lease " + std::to_string(lease);
  etcd::Reply reply =
      gateway_->post("/v3/lease/revoke", {{"ID", std::to_string(lease)}}, deadlineAfter(call_timeout_), what);
  if (reply.code == kGrpcNotFound) return;  // expired, or revoked by an attempt whose reply was lost
  requireOk(reply, describe(), what);
}

void EtcdStore::setWithLease(const std::string& key, const std::string& value, int64_t lease) {
  const std::string what = "setting key '" + etcdKey(key) + "' with lease " + std::to_string(lease);
  etcd::Reply reply =
      gateway_->post("/v3/kv/put", putOf(etcdKey(key), value, lease), deadlineAfter(call_timeout_), what);
  if (reply.code == kGrpcNotFound) leaseExpired(describe(), lease, what);
  requireOk(reply, describe(), what);
}

}  // namespace dtrain
